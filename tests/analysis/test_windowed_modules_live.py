"""The modules section window by window on a live CPU recording (real module events and
fwdbwd flows, one window per step) equals it on the whole trace."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.modules import module_tree
from trainprof.analysis.streaming.windows import windows_of
from trainprof.structs import asdict
from trainprof.trace.load import load_file

from helpers.module_workload import ACTIVE_STEPS, record_nested_model
from windowed_check import as_json, differences


def test_a_live_recording_streams_to_the_same_tree(tmp_path):
    pytest.importorskip("torch")
    trace = load_file(str(record_nested_model(tmp_path)))
    steps = find_steps(trace)
    whole = module_tree(trace, steps)
    assert len(steps) == ACTIVE_STEPS and whole.backward_source == "fwdbwd flows"
    assert len(whole.rows) == 6 and all(r.calls == ACTIVE_STEPS for r in whole.rows)
    windows = windows_of(trace, steps, 1)
    assert len(windows) == ACTIVE_STEPS
    got = module_tree.over(windows, steps)
    assert not differences(as_json(got), as_json(whole))
    share = [asdict(t.where(lambda name: "mm" in name)) for t in (got, whole)]
    assert share[1]["path"] == "Net_0/Block_0/Heavy_0" and not differences(*share)
