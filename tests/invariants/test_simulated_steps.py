"""Every property of tests/invariants/properties.py on the two simulated GPU-bound steps of
tests/helpers/critical_path_traces.py (a DualPipe-like H800 step, an MI300 DDP step): the path agrees
with their timeline (``path_agrees_with_timeline``) along with everything else."""

from __future__ import annotations

import pytest

import trainprof
from invariants.properties import PROPERTIES, json_of

from helpers.critical_path_traces import ddp_mi300, dualpipe_h800


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    out = {}
    for make in (dualpipe_h800, ddp_mi300):
        path = make().b.write(tmp_path_factory.mktemp(make.__name__) / "t.json")
        a = trainprof.analyze(path)
        out[make.__name__] = (a, json_of(a))
    return out


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__)
@pytest.mark.parametrize("name", ["dualpipe_h800", "ddp_mi300"])
def test_property_holds_on_simulated_step(analysed, name, prop):
    a, d = analysed[name]
    prop(a, d)
