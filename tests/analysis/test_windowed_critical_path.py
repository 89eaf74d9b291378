"""The critical_path section window by window equals it on the whole trace, the steps of a long
trace chosen the same way."""

from __future__ import annotations

import pytest

from trainprof.analysis.critical_path import critical_path, section
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file
from trainprof.trace.window import time_slice

from windowed_check import as_json, check_every_trace, differences, shared_traces


@pytest.fixture(scope="module")
def traces():
    return shared_traces()


def test_every_shared_trace_streams_to_the_same_result(traces):
    assert check_every_trace(critical_path, "critical_path", traces) > 10


def _gpu_bound_steps(builder, tmp_path, steps: int = 10):
    """Steps of 100 µs on the host; each launches a 40 µs kernel at its start and, at 90 µs, a
    kernel of 60 µs that runs past the host's step (95 to 155): the next step begins only
    then, 55 µs after its host range, which lies in the window before."""
    for n in range(steps):
        t = 100.0 * n
        builder.step(n, t, 100)
        builder.op("aten::add", t + 5, 90)
        builder.launch(t + 10, 5, name="a", k_ts=t + 20, k_dur=40)
        builder.launch(t + 90, 3, name="late", k_ts=t + 95, k_dur=60)
    return load_file(builder.write(tmp_path / "t.json"))


def test_work_running_into_the_next_window_is_on_its_own_steps_path(builder, tmp_path):
    trace = _gpu_bound_steps(builder, tmp_path)
    steps = find_steps(trace)
    whole = critical_path(trace, steps)
    assert list(steps.starts[:3]) == [0.0, 155.0, 255.0] and len(whole.steps) == 10
    # Step k >= 1 runs from 100k + 55 to 100k + 155: the add op (to 90), its late launch (to
    # 95) and the late kernel (60 µs); step 0 has its whole add (from 5), both launches' lags.
    assert [s.step_us for s in whole.steps] == pytest.approx([155.0] + [100.0] * 9)
    for path in whole.steps[1:]:
        split = {k: v for k, v in path.split_us.items() if v}
        assert split == pytest.approx({"host_compute": 35.0, "launch_overhead": 5.0,
                                       "gpu_compute": 60.0})
    late = next(i for i in whole.items if i.name == "late")
    assert late.on_path_us == pytest.approx(60.0 * 10)
    for per in (1, 2, 3):
        windows = windows_of(trace, steps, per)
        got = critical_path.over(windows, steps)
        assert not differences(as_json(got), as_json(whole)), per
        surveys = [critical_path.survey(w) for w in windows]  # every step: the whole range
        again = critical_path.from_ranges(surveys, steps, lambda a, b: time_slice(trace, a, b))
        assert not differences(as_json(again), as_json(whole)), per


def test_a_long_trace_keeps_the_same_evenly_spaced_steps(builder, tmp_path, monkeypatch):
    trace = _gpu_bound_steps(builder, tmp_path)
    steps = find_steps(trace)
    monkeypatch.setattr(section, "STEP_EVENTS", 20)  # room for about three of the ten steps
    whole = critical_path(trace, steps)
    chosen = [s.step for s in whole.steps]
    assert chosen == [int(steps.numbers[k]) for k in (0, 4, 9)]
    assert "3 of the 10 steps" in whole.notes[0]
    for per in (1, 2, 3):
        got = critical_path.over(windows_of(trace, steps, per), steps)
        assert [s.step for s in got.steps] == chosen
        assert not differences(as_json(got), as_json(whole)), per
        windows = windows_of(trace, steps, per)  # one pass: partial(window), combine(parts)
        one_pass = critical_path.combine([critical_path.partial(w) for w in windows], steps)
        assert not differences(as_json(one_pass), as_json(whole)), per
        read_once = critical_path.over(iter(windows), steps)
        assert not differences(as_json(read_once), as_json(whole)), per
        surveys = [critical_path.survey(w) for w in windows]  # a reader that can read again
        again = critical_path.from_ranges(surveys, steps, lambda a, b: time_slice(trace, a, b))
        assert not differences(as_json(again), as_json(whole)), per


def test_the_parts_of_a_long_trace_hold_the_chosen_steps_and_their_margins(
        builder, tmp_path, monkeypatch):
    trace = _gpu_bound_steps(builder, tmp_path)
    steps = find_steps(trace)
    monkeypatch.setattr(section, "STEP_EVENTS", 20)
    windows = windows_of(trace, steps, 1)
    plan = critical_path.plan([critical_path.survey(w) for w in windows], steps)
    kept = sum(len(critical_path.partial(w, plan).trace.events) for w in windows)
    # Steps 0, 4 and 9 with one step each side: from the start to step 2's start, steps 3 to
    # 5, and step 8 to the end.
    s = steps.starts
    ts = trace.events.ts
    want = int(((ts < s[2]) | ((ts >= s[3]) & (ts < s[6])) | (ts >= s[8])).sum())
    assert kept == want < len(trace.events)


def test_a_broken_clock_is_seen_across_windows(builder, tmp_path):
    for n in range(4):
        builder.step(n, 100.0 * n, 100)
        builder.op("aten::add", 100.0 * n + 10, 50)
    builder.op("aten::mul", 2e11, 10)  # two days later, owned by the last window only
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    got = critical_path.over(windows_of(trace, steps, 1), steps)
    assert got.steps == [] and "more than a day" in got.notes[0]
    assert as_json(got) == as_json(critical_path(trace, steps))


@pytest.mark.parametrize("case", ["sorted", "unsorted", "overlapping", "nan", "two"])
def test_times_within_ranges_match_a_check_of_every_range(case):
    # Times sorted by start as events are (or not), ranges as plans make them (sorted,
    # disjoint, open ends) or not: each time is in a range exactly when one holds it.
    import numpy as np

    from trainprof.analysis.critical_path.windowed import _within

    rng = np.random.default_rng(7)
    ts = np.sort(rng.uniform(0, 1000, 20_000))
    ts[100:110] = [0.0, 10.0, 10.0, 20.0, 250.0, 250.0, 300.0, 999.0, 500.0, 510.0]  # edges
    ranges = ((-np.inf, 10.0), (20.0, 250.0), (300.0, 500.0), (510.0, np.inf))
    if case == "unsorted":
        rng.shuffle(ts)
    elif case == "overlapping":
        ranges = ((0.0, 400.0), (100.0, 120.0), (300.0, 600.0))
    elif case == "nan":
        ts[5] = np.nan
    elif case == "two":
        ranges = ranges[1:3]
    expected = [any(start <= x < end for start, end in ranges) for x in ts.tolist()]
    assert _within(ts, ranges).tolist() == expected
