"""The device span (``device_span_*``) against an independent reading
(tests/analysis/device_span_reference.py) on every shared trace, and on synthetic steps where
the re-timed step window and the recorded steps hold different device work."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.overview.timeline import gpu_timeline
from trainprof.trace.load import load_file

from device_span_reference import device_span
from helpers.paths import SHARED_TRACE_FILES


def _ours_and_reference(path):
    """(ours, the reference's) (span µs, idle %) over the steps trainprof kept, as recorded."""
    trace = load_file(path)
    steps = find_steps(trace)
    timeline = gpu_timeline(trace, steps)
    ours = (timeline.device_span_ms * 1000.0, timeline.device_span_idle_pct)
    if steps.source == "ProfilerStep":
        return ours, device_span(path, steps={int(n) for n in steps.numbers})
    # Other windows (optimizer steps, the whole trace) in the file's own clock.
    shift = trace.t0_us - (trace.metadata.get("baseTimeNanoseconds") or 0) / 1000.0
    start, end = steps.recorded_span
    return ours, device_span(path, window=(start + shift, end + shift))


@pytest.mark.parametrize("path", SHARED_TRACE_FILES, ids=lambda p: p.name[:32])
def test_device_span_agrees_with_reference(path):
    (span, idle), (ref_span, ref_idle) = _ours_and_reference(path)
    assert span == pytest.approx(ref_span, rel=1e-6)
    assert idle == pytest.approx(ref_idle, abs=0.01)


def test_kernel_past_the_window_end_is_counted_whole(builder, tmp_path):
    """A collective launched in the step whose kernel ends after the step lengthens the device
    span rather than being cut at the end; a kernel with no correlation id counts by its start."""
    builder.step(1, 0, 1000)
    builder.launch(10, 5, k_ts=100, k_dur=300)  # busy 100-400
    builder.launch(850, 5, name="ncclDevKernel_AllReduce_Sum_f32", k_ts=900, k_dur=600)
    builder.kernel("late", 1200, 100)  # no correlation, starts after the step: not in the span
    path = builder.write(tmp_path / "t.json")
    (span, idle), (ref_span, ref_idle) = _ours_and_reference(path)
    # Span 100-1500 = 1400 µs, busy 300 + 600: idle 500 / 1400.
    assert (ref_span, ref_idle) == pytest.approx((1400, 500 / 1400 * 100))
    assert (span, idle) == pytest.approx((ref_span, ref_idle), abs=1e-6)


def test_kernel_from_before_the_window_is_left_out(builder, tmp_path):
    builder.kernel("leftover", -200, 300)  # starts before the step, runs into it
    builder.step(1, 0, 1000)
    builder.launch(10, 5, k_ts=400, k_dur=200)
    builder.launch(20, 5, k_ts=800, k_dur=200)
    path = builder.write(tmp_path / "t.json")
    (span, idle), (ref_span, ref_idle) = _ours_and_reference(path)
    # Span 400-1000 = 600 µs, busy 400: idle 200 / 600.
    assert (ref_span, ref_idle) == pytest.approx((600, 200 / 600 * 100))
    assert (span, idle) == pytest.approx((ref_span, ref_idle), abs=1e-6)


def test_work_launched_after_the_last_step_is_left_out(builder, tmp_path):
    """The re-timed last step runs on to the end of its own device work (1500 µs); a kernel the
    host launched after the recorded step ended (the next iteration, recorded until the
    profiler stops) runs inside that re-timed window but is not the step's work (HTA: only
    kernels launched inside the ProfilerSteps count)."""
    builder.step(1, 0, 1000)
    builder.launch(100, 5, k_ts=200, k_dur=400)  # 200-600
    builder.launch(900, 5, k_ts=1300, k_dur=200)  # queued: 1300-1500, the step's last work
    builder.launch(1050, 5, name="next_iteration", k_ts=1100, k_dur=100)  # after the step
    path = builder.write(tmp_path / "t.json")
    (span, idle), (ref_span, ref_idle) = _ours_and_reference(path)
    # Span 200-1500 = 1300 µs, busy 400 + 200: idle 700 / 1300 (the re-timed window: 600).
    assert (ref_span, ref_idle) == pytest.approx((1300, 700 / 1300 * 100))
    assert (span, idle) == pytest.approx((ref_span, ref_idle), abs=1e-6)


def test_streamed_windows_give_the_same_device_span(builder, tmp_path):
    """Window by window (analysis/streaming) the recorded steps give the same span."""
    from trainprof.analysis.streaming.windows import windows_of

    for n in range(4):
        builder.step(n + 1, n * 1000, 1000)
        builder.launch(n * 1000 + 100, 5, k_ts=n * 1000 + 200, k_dur=300)
        builder.launch(n * 1000 + 900, 5, k_ts=n * 1000 + 1100, k_dur=250)  # into the next
    builder.launch(4100, 5, name="after", k_ts=4400, k_dur=50)
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    whole = gpu_timeline(trace, steps)
    streamed = gpu_timeline.over(windows_of(trace, steps, 1), steps)
    assert streamed.device_span_ms == pytest.approx(whole.device_span_ms)
    assert streamed.device_span_idle_pct == pytest.approx(whole.device_span_idle_pct)
