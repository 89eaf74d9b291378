"""Idle, copies, memory, communication and syncs computed window by window equal the whole-trace
figures on every shared trace, and on synthetic traces where work crosses a window boundary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.windowed_check import check_every_trace, shared_traces
from trainprof.analysis.intervals import union
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.communication import communication
from trainprof.analysis.sections.copies import copies
from trainprof.analysis.sections.idle import idle_time
from trainprof.analysis.sections.memory import memory
from trainprof.analysis.sections.syncs import EXPLICIT_SYNC, PROFILER_SYNC, sync_stats
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file
from trainprof.trace.model import DEVICE_KINDS, FLAG_COMM, Kind, memcpy_direction

SECTIONS = {"copies": copies, "communication": communication, "syncs": sync_stats,
            "idle": idle_time, "memory": memory}
MB = 1_000_000
RECORD = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000,
          "dtype": "Float"}
STEP = 1000.0


@pytest.fixture(scope="module")
def shared():
    """Every shared trace with its steps, loaded once."""
    return shared_traces()


def same(a, b, where: str = "") -> None:
    """Equal results: floats within relative 1e-9 (sums may be re-associated), all else exact."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, float | int):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9), where
    else:
        assert a == b, where


def streamed(section, trace, steps, per: int):
    return section.over(windows_of(trace, steps, per), steps)


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_streamed_equals_whole_and_the_code_before_on_every_shared_trace(shared, name):
    """Whole == the section's result from before it streamed (windowed_golden/), and windows
    of 1, 2 and 3 steps == whole, on every shared trace (some cut into several windows)."""
    assert check_every_trace(SECTIONS[name], name, shared) > 0


def test_copy_counts_and_bytes_match_a_plain_count(shared):
    """An independent count of the copies in the step span, by direction, on every trace."""
    for label, trace, steps in shared:
        start, end = steps.span
        ev = trace.events
        want: dict[str, list[float]] = {}
        for i in np.flatnonzero(ev.of_kind(Kind.MEMCPY, Kind.MEMSET)):
            if ev.ts[i] < end and ev.end[i] > start:
                k = "memset" if ev.kind[i] == Kind.MEMSET else memcpy_direction(
                    ev.names[ev.name[i]])
                row = want.setdefault(k, [0, 0.0])
                row[0] += 1
                row[1] += ev.nbytes[i] if np.isfinite(ev.nbytes[i]) else 0.0
        got = streamed(copies, trace, steps, 1)
        assert {r.kind: [r.count, pytest.approx(r.bytes)] for r in got.rows} == want, label


def test_streamed_figures_match_plain_computations(shared):
    """Figures checked by an independent route on every trace: a device's busy time is the
    union of its events in the span; communication kernels and memory events counted plainly;
    a new-format device's peak is its largest Total Allocated."""
    for label, trace, steps in shared:
        start, end = steps.span
        ev = trace.events
        in_span = (ev.ts < end) & (ev.end > start)
        for row in streamed(idle_time, trace, steps, 1).devices:
            mine = in_span & ev.of_kind(*DEVICE_KINDS) & (ev.device == row.device)
            busy = union(np.maximum(ev.ts[mine], start), np.minimum(ev.end[mine], end)).total()
            assert row.busy_us == pytest.approx(busy, rel=1e-9, abs=1e-6), label
            assert row.events == int(mine.sum()), label
        comm = streamed(communication, trace, steps, 1)
        kernels = int((in_span & (ev.kind == Kind.KERNEL) & ev.flagged(FLAG_COMM)).sum())
        if comm.source == "kernels":
            assert sum(t.count for t in comm.types) == kernels, label
        mem = trace.memory
        for d in streamed(memory, trace, steps, 1).devices:
            if d.device == "cpu":
                mine = mem.device_type == 0
            else:
                mine = (mem.device_type == 1) & (mem.device_id == int(d.device.split(":")[1]))
            totals = mem.total_allocated[mine]
            if d.has_totals:
                assert d.events == int(np.isfinite(totals).sum()), label
                assert d.peak_allocated == np.nanmax(totals), label
            else:
                assert d.events == int(mine.sum()), label


def _device_event(b, kind: str, name: str, ts: float, dur: float, **args) -> None:
    """A device event without a launch (steps keep their host times)."""
    b.event(b.spelling[kind], name, ts, dur, on_device=True,
            args={"device": b.device, "stream": b.stream, **args})


def _three_steps(b, count: int = 3):
    for n in range(count):
        b.step(n + 1, n * STEP, STEP)
    return b


def test_copies_crossing_windows(tmp_path, builder):
    """A copy from step 1 into step 2 (half hidden under a kernel), and one from step 2 past the
    end of step 3 (counted up to the span's end)."""
    b = _three_steps(builder)
    b.kernel("volta_sgemm_128x64_nn", 1100, 100)
    _device_event(b, "memcpy", "Memcpy HtoD (Pageable -> Device)", 950, 200, bytes=2_000_000)
    _device_event(b, "memcpy", "Memcpy DtoH (Device -> Pinned)", 1900, 1200, bytes=1_000_000)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert steps.span == (0.0, 3000.0)
    for per in (1, 2, 3):
        got = streamed(copies, trace, steps, per)
        h2d, d2h = got.row("HtoD"), got.row("DtoH")
        assert (h2d.count, h2d.time_us, h2d.exposed_us) == (1, 200, 150)
        assert (d2h.count, d2h.time_us, d2h.exposed_us) == (1, 1100, 1100)
        # Busy time as a share of the 3000 µs window.
        assert (h2d.time_pct, d2h.time_pct) == pytest.approx((200 / 30, 1100 / 30))
        assert d2h.bandwidth_gbps == pytest.approx(1e6 / 1100 * 1e-3)
        assert (got.time_pct, got.exposed_pct) == pytest.approx((1300 / 30, 1250 / 30))
        same(got.to_dict(), copies(trace, steps).to_dict())


def test_collective_instances_streamed_equal_whole(shared):
    for label, trace, steps in shared:
        whole = communication(trace, steps).instances
        for per in (1, 2, 3):
            got = streamed(communication, trace, steps, per).instances
            for name in ("type", "step", "start_us", "dur_us"):
                assert np.array_equal(getattr(got, name), getattr(whole, name)), label
            assert np.array_equal(got.step_ends(), whole.step_ends()), label


def test_collectives_in_flight_across_windows(tmp_path, builder):
    """A sized host op launching a kernel in step 1 and one in step 2 (its 4000 bytes count
    once), and an all_reduce kernel running from step 2 into step 3 over a compute kernel."""
    b = _three_steps(builder)
    b.op("record_param_comms", 880, 170, args=RECORD)
    b.stream = 8
    b.launch(890, 5, name="ncclDevKernel_Generic_4", k_ts=900, k_dur=50)
    b.launch(1010, 5, name="ncclDevKernel_Generic_4", k_ts=1020, k_dur=80)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1900, 400)
    b.stream = 7
    b.launch(2002, 3, name="volta_sgemm_128x64_nn", k_ts=2010, k_dur=100)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert steps.span == (0.0, 3000.0)
    for per in (1, 2, 3):
        got = streamed(communication, trace, steps, per)
        (row,) = got.types
        assert (row.type, row.count, row.sized, row.bytes) == ("all_reduce", 3, 1, 4000)
        assert (row.time_us, row.busy_us, row.exposed_us) == (530, 530, 430)
        assert got.per_step_ms == pytest.approx([0.05, 0.18, 0.3])
        assert list(got.instances.step) == [1, 2, 2]
        same(got.to_dict(), communication(trace, steps).to_dict())


def test_host_collective_across_windows(tmp_path, builder):
    """Gloo: an all_reduce on its own thread from step 1 into step 2, half of it beside an op
    on the main thread."""
    b = _three_steps(builder)
    b.annotation("gloo:all_reduce", 950, 200, tid=2)
    b.op("aten::mm", 1000, 100)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    for per in (1, 2, 3):
        got = streamed(communication, trace, steps, per)
        (row,) = got.types
        assert got.source == "host ops"
        assert (row.type, row.count, row.time_us, row.exposed_us) == ("all_reduce", 1, 200, 100)
        assert got.per_step_ms == pytest.approx([0.05, 0.15, 0.0])


def test_host_collective_threads_of_every_window(tmp_path, builder):
    """Gloo collectives on thread 2 in step 1 and on thread 3 in step 2: thread 3 runs
    collectives, so its op beside the first one hides nothing, though the first window sees
    no collective on it; the main thread's op hides 30 µs of the second."""
    b = _three_steps(builder)
    b.annotation("gloo:all_reduce", 100, 200, tid=2)
    b.op("aten::mm", 150, 100, tid=3)
    b.annotation("gloo:all_reduce", 1100, 100, tid=3)
    b.op("aten::add", 1120, 30)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    for per in (1, 2, 3):
        got = streamed(communication, trace, steps, per)
        (row,) = got.types
        assert (row.count, row.busy_us, row.exposed_us) == (2, 300, 270)
        assert (got.busy_us, got.exposed_us) == (300, 270)
        same(got.to_dict(), communication(trace, steps).to_dict())


def test_syncs_across_windows(tmp_path, builder):
    """A stream sync in step 1 blocking into step 2; torch.cuda.synchronize() in step 2 with no
    op after it until step 4 (its window cannot tell it from the profiler's own); the
    profiler's own sync after the last op."""
    b = _three_steps(builder, 4)
    runtime = b.spelling["runtime"]
    b.op("aten::item", 940, 220, tid=2)  # a thread of its own: it crosses the step's end
    b.event(runtime, "cudaStreamSynchronize", 950, 200, tid=2)
    b.event(runtime, "cudaDeviceSynchronize", 1500, 20)
    b.op("aten::add", 3300, 10)
    b.event(runtime, "cudaDeviceSynchronize", 3950, 10)
    for launch, kernel in ((100, 110), (1530, 1600), (2100, 2150), (3302, 3320)):
        b.launch(launch, 3, k_ts=kernel, k_dur=50 if kernel == 1600 else 10)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert steps.span == (0.0, 4000.0)
    whole = sync_stats(trace, steps)
    for per in (1, 2, 3):
        got = streamed(sync_stats, trace, steps, per)
        assert (got.count, got.blocked_us, got.loop_count, got.profiler_syncs) == (3, 230, 2, 1)
        assert [(s.count, s.blocked_us) for s in got.per_step] == [(1, 50), (1, 170), (0, 0),
                                                                   (0, 0)]
        assert got.loop_blocked_us == 220
        assert (got.loop_gpu_idle_after_us, got.loop_avoidable_us) == (80, 20)
        causes = {s.call + " " + str(s.cause): s.total_us for s in got.sites}
        assert causes[f"cudaDeviceSynchronize {EXPLICIT_SYNC}"] == 20
        assert causes[f"cudaDeviceSynchronize {PROFILER_SYNC}"] == 10
        same(got.to_dict(), whole.to_dict())


def test_idle_across_windows(tmp_path, builder):
    """Stream 7: K1 900-1100 (no launch) runs from step 1 into step 2; K2 1200-1300 launched at
    1150 (host wait 100 after K1). Stream 9: K3 500-600, then K4 3500-3550 launched at 3400:
    the device is idle from 1300 to 3500, through all of step 3, while host ops run, one of
    them (2500-3100) across the step 3/4 boundary."""
    b = _three_steps(builder, 4)
    b.kernel("k1", 900, 200)
    b.launch(1150, 5, name="k2", k_ts=1200, k_dur=100)
    b.op("aten::cpu_work", 1400, 500)
    b.op("aten::more", 2500, 600)
    b.op("aten::last", 3150, 150)
    b.stream = 9
    b.kernel("k3", 500, 100)
    b.launch(3400, 5, name="k4", k_ts=3500, k_dur=50)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert steps.span == (0.0, 4000.0)
    for per in (1, 2, 3):
        got = streamed(idle_time, trace, steps, per)
        (dev,) = got.devices
        assert (dev.events, dev.gaps, dev.span_us, dev.busy_us) == (4, 3, 3050, 450)
        assert (dev.host_wait_us, dev.kernel_wait_us, dev.other_us) == (2300, 0, 300)
        s7, s9 = got.streams
        assert (s7.stream, s7.events, s7.span_us, s7.host_wait_us) == (7, 2, 400, 100)
        assert (s9.stream, s9.events, s9.span_us, s9.host_wait_us) == (9, 2, 3050, 2900)
        gaps = [(g.duration_us, g.category, g.step, g.start_ms) for g in got.longest]
        assert gaps == [(2200, "host_wait", 2, 1.3), (300, "other", 1, 0.6),
                        (100, "host_wait", 2, 1.1)]
        top = got.longest[0]
        assert [(h.name, h.overlap_us) for h in top.host] == [
            ("aten::more", 600), ("aten::cpu_work", 500), ("aten::last", 150)]
        assert top.no_host_op_us == 2200 - (600 + 500 + 150 + 5)  # and the 5 µs launch call
        same(got.to_dict(), idle_time(trace, steps).to_dict())


@pytest.mark.parametrize("old", [False, True])
def test_memory_allocation_freed_windows_later(tmp_path, builder, old):
    """4 MB allocated in step 1 are freed in step 3; 1 MB from step 1 is freed in step 2; 2 MB
    allocated in step 3 stay. 100 MB were allocated before the trace (new format only: the
    old one knows levels relative to the trace's start)."""
    b = _three_steps(builder)
    base = 0 if old else 100 * MB
    level = base
    for at, size, op in ((100, 4, "aten::mm"), (500, 1, "aten::add"), (1500, -1, None),
                         (2500, -4, None), (2600, 2, "aten::mm")):
        if op:
            b.op(op, at - 10, 20)
        level += size * MB
        b.memory(at, size * MB, None if old else level, reserved=level + 50 * MB)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    for per in (1, 2, 3):
        (d,) = streamed(memory, trace, steps, per).devices
        assert (d.events, d.has_totals, d.peak_above_start) == (5, not old, 5 * MB)
        assert d.peak_allocated == (None if old else base + 5 * MB)
        assert (d.peak_step, d.peak_op, d.peak_ms) == (1, "aten::add", 0.5)
        assert [(e.step, e.allocated) for e in d.step_end_allocated] == [
            (1, base + 5 * MB), (2, base + 4 * MB), (3, base + 2 * MB)]
        assert d.curve.allocated == [base + x * MB for x in (4, 5, 4, 0, 2)]
        assert [(o.op, o.allocations, o.bytes) for o in d.top_ops] == [
            ("aten::mm", 2, 6 * MB), ("aten::add", 1, 1 * MB)]
        assert d.peak_reserved == (None if old else base + 55 * MB)
        same(d.to_dict(), memory(trace, steps).devices[0].to_dict())


def test_memory_outside_every_op(tmp_path, builder):
    """Allocations with no host op around them (no op in the trace at all) are charged to
    "(no op recorded)" in every window."""
    b = _three_steps(builder)
    for at, size in ((100, 3), (1100, 2), (2100, -1)):
        b.memory(at, size * MB, None)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    for per in (1, 2, 3):
        (d,) = streamed(memory, trace, steps, per).devices
        assert [(o.op, o.allocations, o.bytes) for o in d.top_ops] == [
            ("(no op recorded)", 2, 5 * MB)]
        assert (d.peak_above_start, d.peak_op, d.peak_step) == (5 * MB, None, 2)


def test_events_on_a_window_boundary(tmp_path, builder):
    """Steps that touch: a memory event, a zero-length collective and a zero-length memset at
    the very start of step 2 (the end of step 1) are counted once, and the memory event sets
    the level at step 1's end (events at a step's end belong to it)."""
    b = _three_steps(builder)
    for at, size, total in ((500, 1, 1), (1000, 2, 3), (1500, -1, 2)):
        b.memory(at, size * MB, total * MB)
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000, 0)
    _device_event(b, "memset", "Memset (Device)", 1000, 0, bytes=64)
    b.kernel("volta_sgemm_128x64_nn", 2500, 10)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert list(steps.ends[:2]) == list(steps.starts[1:])
    for per in (1, 2, 3):
        (d,) = streamed(memory, trace, steps, per).devices
        assert [(e.step, e.allocated) for e in d.step_end_allocated] == [
            (1, 3 * MB), (2, 2 * MB), (3, 2 * MB)]
        comm = streamed(communication, trace, steps, per)
        assert (comm.source, sum(t.count for t in comm.types)) == ("kernels", 1)
        assert streamed(copies, trace, steps, per).row("memset").count == 1
        for section in SECTIONS.values():
            same(streamed(section, trace, steps, per).to_dict(),
                 section(trace, steps).to_dict())


def test_allocator_calls_overlapping_across_windows(tmp_path, builder):
    """A cudaMalloc from step 1 into step 2 (900-1200) and one on another thread in step 2
    (1100-1300): 400 µs inside the steps, the overlap counted once."""
    b = _three_steps(builder)
    b.event(b.spelling["runtime"], "cudaMalloc", 900, 300)
    b.event(b.spelling["runtime"], "cudaMalloc", 1100, 200, tid=2)
    trace = load_file(b.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    for per in (1, 2, 3):
        calls = streamed(memory, trace, steps, per).allocator
        assert (calls.calls, calls.time_us) == (2, 400)
