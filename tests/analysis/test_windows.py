"""Windows of a loaded trace: every event in some window, every step answered for once."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.streaming.windows import WindowedSection, window_bounds, windows_of
from trainprof.trace.load import load_file
from trainprof.trace.window import time_slice

TRACE = "tests/data/traces/hta/tests/data/df_index_resolver/df_index_resolver.json.gz"


@pytest.fixture(scope="module")
def trace():
    return load_file(TRACE)


def test_slices_without_margin_partition_the_events(trace):
    steps = find_steps(trace)
    windows = windows_of(trace, steps, per_window=2, margin=0)
    assert [len(w.steps) for w in windows] == [2, 2, 1] and len(steps) == 5
    assert sum(len(w.trace.events) for w in windows) == len(trace.events)
    assert sum(len(w.trace.memory) for w in windows) == len(trace.memory)
    joined = np.concatenate([w.trace.events.ts for w in windows])
    assert np.array_equal(joined, trace.events.ts)
    numbers = np.concatenate([w.steps.numbers for w in windows])
    assert np.array_equal(numbers, steps.numbers)


def test_margin_reaches_one_step_each_side(trace):
    steps = find_steps(trace)
    start, end = window_bounds(steps, 2, 3, margin=1)
    assert start == steps.starts[1] and end == steps.starts[4]
    assert window_bounds(steps, 0, 1, margin=1)[0] == -math.inf
    assert window_bounds(steps, 4, 5, margin=1)[1] == math.inf
    middle = windows_of(trace, steps, per_window=1)[2]
    ts = middle.trace.events.ts
    inside = (trace.events.ts >= steps.starts[1]) & (trace.events.ts < steps.starts[4])
    assert len(ts) == int(inside.sum()) and ts.min() >= steps.starts[1] and ts.max() < end


def test_slice_keeps_tables_and_launch_context(trace):
    part = time_slice(trace, 0.0, float(trace.events.ts[len(trace.events) // 2]))
    assert part.events.names is trace.events.names
    names = [part.events.names[i] for i in part.events.name[:50]]
    first = int(np.searchsorted(trace.events.ts, 0.0))
    assert names == [trace.events.names[i] for i in trace.events.name[first:first + 50]]


def test_windowed_section_equals_whole_when_parts_answer_for_their_steps(trace):
    steps = find_steps(trace)

    def partial(window):  # kernel time that starts in each of the window's own steps
        ev = window.trace.events
        kernel = ev.kind == 7
        return [float(ev.dur[kernel & (ev.ts >= s) & (ev.ts < e)].sum())
                for s, e in zip(window.steps.starts, window.steps.ends, strict=True)]

    section = WindowedSection(partial=partial, combine=lambda parts, _: sum(parts, []))
    whole = section(trace, steps)
    assert len(whole) == 5 and min(whole) > 0
    for per in (1, 2, 3):
        assert section.over(windows_of(trace, steps, per), steps) == whole
