"""Host, launch, operators, kernels and compilation streamed window by window equal the
in-memory sections on every shared trace, and on synthetic traces where work crosses a window
boundary."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.sections.compilation import compilation
from trainprof.analysis.sections.host import host_time
from trainprof.analysis.sections.kernels import kernel_stats
from trainprof.analysis.sections.launch import launch_stats
from trainprof.analysis.sections.operators import operator_stats, operators_section
from trainprof.analysis.streaming.windows import owns, windows_of
from trainprof.analysis.tabular import Quantiles
from trainprof.trace.load import load_file
from trainprof.trace.model import Kind

from helpers.paths import SHARED, SHARED_TRACE_FILES
from windowed_check import differences, golden

SECTIONS = {"compilation": compilation, "host": host_time, "kernels": kernel_stats, "launch": launch_stats, "operators": operators_section}


@pytest.fixture(scope="module")
def shared():
    """Every shared trace (by its name under shared/traces), loaded once, with its steps and
    its cuts into windows of 1, 2 and 3 steps that make more than one window (one window is
    the in-memory path itself). The windows are shared by the sections, as in a streamed run."""
    out = {}
    for path in SHARED_TRACE_FILES:
        trace = load_file(path)
        steps = find_steps(trace)
        cuts = [w for w in (windows_of(trace, steps, per) for per in (1, 2, 3)) if len(w) > 1]
        out[str(path.relative_to(SHARED))] = (trace, steps, cuts)
    return out


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_streamed_equals_in_memory_on_every_shared_trace(shared, name):
    """In memory: the result from before the section streamed; in windows of 1, 2 and 3 steps:
    the in-memory result."""
    section, expected = SECTIONS[name], golden(name)
    assert sorted(expected) == sorted(shared)
    streamed_traces = 0
    for file, (trace, steps, cuts) in shared.items():
        whole = json.loads(json.dumps(section(trace, steps).to_dict()))
        assert differences(whole, expected[file]) == [], file
        for windows in cuts:
            streamed = json.loads(json.dumps(section.over(windows, steps).to_dict()))
            assert differences(streamed, whole) == [], (file, len(windows))
        streamed_traces += bool(cuts)
    assert streamed_traces >= 8


def by_hand_steps(*bounds: float) -> StepWindows:
    """Step windows [bounds[i], bounds[i + 1])."""
    b = np.array(bounds, dtype=np.float64)
    return StepWindows(numbers=np.arange(1, len(b)), starts=b[:-1], ends=b[1:],
                       source="ProfilerStep")


def test_kernels_match_an_independent_count(shared):
    """Calls and time per kernel name, counted straight from the events, on every trace."""
    for trace, steps, _ in shared.values():
        ev = trace.events
        kernels = np.flatnonzero(ev.kind == Kind.KERNEL)
        calls = Counter(ev.names[ev.name[k]] for k in kernels)
        stats = kernel_stats(trace, steps)
        assert sum(r.calls for r in stats.rows) == len(kernels) == stats.calls
        assert stats.total_us == pytest.approx(float(ev.dur[kernels].sum()), rel=1e-9)
        for r in stats.rows:
            assert r.calls >= calls[r.name] > 0


def test_kernel_launched_in_one_window_running_in_the_next(builder, tmp_path):
    builder.annotation("start", 0, 1)  # the trace's time 0
    mm = builder.op("aten::mm", 90, 9)
    builder.launch(95, 3, name="sm80_xmma_gemm_f16f16", k_ts=120, k_dur=30,
                   external_id=mm["args"]["External id"])
    add = builder.op("aten::addmm", 140, 5)
    builder.launch(141, 2, name="sm80_xmma_gemm_f16f16", k_ts=160, k_dur=10,
                   external_id=add["args"]["External id"])
    builder.launch(250, 2, name="elementwise", k_ts=260, k_dur=5)
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 100, 200, 300)
    windows = windows_of(trace, steps, 1)
    # The first gemm starts in the second window; its launch and op only in the first.
    assert owns(windows[1], np.array([120.0]))[0] and owns(windows[0], np.array([95.0]))[0]
    stats = kernel_stats.over(windows, steps)
    gemm = next(r for r in stats.rows if r.name.startswith("sm80"))
    assert (gemm.calls, gemm.total_us, gemm.min_us, gemm.max_us) == (2, 40.0, 10.0, 30.0)
    assert (gemm.op, gemm.op_share_pct) == ("aten::mm", 75.0)
    assert (stats.calls, stats.total_us) == (3, 45.0)
    assert differences(stats.to_dict(), kernel_stats(trace, steps).to_dict()) == []


def test_op_whose_kernel_runs_in_the_next_window(builder, tmp_path):
    builder.annotation("start", 0, 1)
    builder.op("aten::linear", 90, 40)  # crosses into the second window's span
    mm = builder.op("aten::mm", 95, 30)
    builder.launch(96, 2, name="gemm", k_ts=120, k_dur=30, external_id=mm["args"]["External id"])
    relu = builder.op("aten::relu", 150, 10)
    builder.launch(151, 2, name="relu_kernel", k_ts=165, k_dur=5,
                   external_id=relu["args"]["External id"])
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 100, 200, 300)
    stats = operators_section.over(windows_of(trace, steps, 1), steps)
    rows = {r.name: (r.calls, r.host_self_us, r.host_total_us, r.device_self_us,
                     r.device_total_us) for r in stats.rows}
    assert rows == {"aten::linear": (1, 10.0, 40.0, 0.0, 30.0),
                    "aten::mm": (1, 28.0, 30.0, 30.0, 30.0),
                    "aten::relu": (1, 8.0, 10.0, 5.0, 5.0)}
    assert [r.name for r in stats.rows] == ["aten::mm", "aten::relu", "aten::linear"]
    assert differences(stats.to_dict(), operator_stats(trace, steps).to_dict()) == []


def test_launches_back_to_back_across_a_window_boundary(builder, tmp_path):
    builder.annotation("start", 0, 1)
    builder.launch(80, 10, k_ts=150, k_dur=20)  # delay 60; runs in the second window
    builder.launch(120, 10, k_ts=175, k_dur=5)  # 30 µs after the first: back to back
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 100, 200)
    stats = launch_stats.over(windows_of(trace, steps, 1), steps)
    assert (stats.launches, stats.kernels) == (2, 2)
    assert stats.delay_us == Quantiles(mean=52.5, median=52.5, p90=58.5, max=60.0)
    assert stats.launch_us == Quantiles(mean=10.0, median=10.0, p90=10.0, max=10.0)
    assert stats.gpu_idle_pct == pytest.approx(100 * (200 - 25) / 200)
    # The run spans 80..130 while the GPU idles: a quarter of the step time.
    assert stats.cpu_bound_pct == pytest.approx(25.0) and stats.cpu_bound
    assert (stats.small_kernel_pct, stats.shorter_than_launch_pct) == (50.0, 50.0)
    assert stats.starved_kernel_pct == 100.0
    assert [(a.name, a.calls, a.total_us) for a in stats.apis] == [("cudaLaunchKernel", 2, 20.0)]
    assert differences(stats.to_dict(), launch_stats(trace, steps).to_dict()) == []


def test_host_range_in_the_lead_in_of_two_windows(builder, tmp_path):
    builder.annotation("start", 0, 1)
    builder.annotation("load_batch", 70, 60)  # lead-in of step 1 (no device work) and step 2
    builder.launch(140, 5, k_ts=150, k_dur=10)  # the only device work, in step 2
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 100, 200, 300, 400)
    windows = windows_of(trace, steps, 1)
    assert not windows[-1].trace.has_gpu  # computed both ways; the trace ran on a GPU
    h = host_time.over(windows, steps)
    # Idle 390 µs: lead-in is steps 1, 3, 4 whole and [100, 150) of step 2 less the launch.
    assert h.gpu and h.pct == pytest.approx({"data": 0.0, "communication": 0.0,
                                             "after_optimizer": 0.0, "lead_in": 86.25,
                                             "host_bound": 11.25})
    # 30 µs inside each window: only together is it >= 80 % of the range.
    assert [(s.name, s.ms_per_step) for s in h.spots["lead_in"]] == [
        ("load_batch", pytest.approx(60 / 4 / 1000)), ("start", pytest.approx(1 / 4 / 1000))]
    assert differences(h.to_dict(), host_time(trace, steps).to_dict()) == []


def test_untraced_gap_and_compile_range_across_window_edges(builder, tmp_path):
    builder.op("aten::mm", 0, 9_500)
    builder.op("aten::mm", 10_600, 19_400)  # untraced: 500 µs in step 1, 600 µs in step 2
    builder.event("python_function", "train.py(3): read_shard", 9_500, 1_100)
    builder.event("python_function", "<built-in function sleep>", 9_600, 300)  # window 1 only
    builder.op("inductor_compile", 15_000, 10_000)  # first compilation, steps 2 and 3
    builder.op("inductor_compile", 26_000, 1_000)  # a recompilation, step 3
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 10_000, 20_000, 30_000)
    c = compilation.over(windows_of(trace, steps, 1), steps)
    # Neither half reaches the 1 ms minimum gap alone; joined, the gap is 1.1 ms.
    assert c.untraced_per_step_ms == [(1, 0.5), (2, pytest.approx(0.6)), (3, 0.0)]
    assert c.longest_untraced == (1, pytest.approx(1.1))
    assert [(f.name, f.ms_per_step) for f in c.untraced_frames] == [
        ("train.py(3): read_shard", pytest.approx(1.1 / 3)),
        ("<built-in function sleep>", pytest.approx(0.3 / 3))]
    assert c.compile_per_step_ms == [(1, 0.0), (2, 5.0), (3, 6.0)] and c.steps_compiling == [2, 3]
    assert (c.first_compilations, c.recompilations) == (1, 1)
    assert (c.first_ms, c.recompile_ms) == (pytest.approx(10 / 3), pytest.approx(1 / 3))
    assert differences(c.to_dict(), compilation(trace, steps).to_dict()) == []


def test_call_site_frame_in_the_margin(builder, tmp_path):
    builder.annotation("start", 0, 1)
    builder.event("python_function", "train.py(10): step", 90, 40)  # opens in window 1
    builder.op("aten::mm", 110, 10)  # window 2: its frame lies in the margin
    builder.event("python_function", "train.py(20): evaluate", 240, 20)
    builder.op("aten::mm", 250, 4)
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 100, 200, 300)
    stats = operators_section.over(windows_of(trace, steps, 1), steps)
    (row,) = stats.rows
    assert stats.has_stacks and (row.name, row.calls, row.host_total_us) == ("aten::mm", 2, 14.0)
    assert [(s.source, s.calls, s.host_total_us) for s in row.call_sites] == [
        ("train.py(10): step", 1, 10.0), ("train.py(20): evaluate", 1, 4.0)]
    assert differences(stats.to_dict(), operator_stats(trace, steps).to_dict()) == []


def test_cpu_only_host_time_after_the_optimizer_in_each_window(builder, tmp_path):
    builder.annotation("start", 0, 1)
    for base in (0, 100):
        builder.annotation("Optimizer.step#SGD.step", base + 60, 20 if base == 0 else 10)
        builder.op("aten::add_", base + 65, 5)
    builder.op("aten::mul", 185, 5)  # an op after the optimizer: not unexplained
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = by_hand_steps(0, 100, 200)
    h = host_time.over(windows_of(trace, steps, 1), steps)
    # After the optimizer: [80, 100) in step 1, [170, 200) less the op in step 2.
    assert not h.gpu
    assert [(p.step, p.ms) for p in h.after_optimizer_per_step_ms] == [(1, 0.02), (2, 0.025)]
    assert h.pct["after_optimizer"] == pytest.approx(22.5) and h.pct["lead_in"] is None
    opt = h.optimizer
    assert (opt.name, opt.ops_per_step, opt.mean_op_us, opt.implementation) == (
        "SGD", 1.0, 5.0, "for-loop")
    assert differences(h.to_dict(), host_time(trace, steps).to_dict()) == []
