"""Derived event columns are computed once per trace and stay right when a column is replaced."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis.event_columns import event_ends
from trainprof.trace.load import load_file
from trainprof.trace.model import HOST_KINDS, Kind


@pytest.fixture
def trace(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.op("aten::add", 10, 20)
    builder.op("aten::mul", 35, 5.5)
    return load_file(builder.write(tmp_path / "t.json"))


def test_event_ends_are_start_plus_duration_computed_once(trace):
    ev = trace.events
    ends = event_ends(ev)
    assert ends.tolist() == [t + d for t, d in zip(ev.ts.tolist(), ev.dur.tolist(), strict=True)]
    assert event_ends(ev) is ends
    with pytest.raises(ValueError):
        ends[0] = 0.0  # shared by every section: read-only


def test_event_ends_follow_a_replaced_column(trace):
    ev = trace.events
    before = event_ends(ev)
    ev.dur = ev.dur * 2
    after = event_ends(ev)
    assert after is not before
    assert after.tolist() == (ev.ts + ev.dur).tolist()


def test_of_kind_matches_a_comparison_per_kind(trace):
    ev = trace.events
    want = np.zeros(len(ev), dtype=bool)
    for k in HOST_KINDS:
        want |= ev.kind == k
    assert ev.of_kind(*HOST_KINDS).tolist() == want.tolist()
    assert ev.of_kind(Kind.KERNEL, Kind.MEMCPY).sum() == 0
    assert ev.of_kind(Kind.CPU_OP, Kind.CPU_OP).sum() == 2 and not ev.of_kind().any()
