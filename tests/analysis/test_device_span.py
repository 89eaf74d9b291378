"""device_span_idle_pct against an independent reading (tests/analysis/device_span_reference.py)
on every shared trace, and on a synthetic step whose last kernel outlives the step window."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.overview.timeline import gpu_timeline
from trainprof.trace.load import load_file

from conftest import SHARED_TRACE_FILES
from device_span_reference import device_span_idle_pct

SHARED_TRACES = SHARED_TRACE_FILES


def _ours_and_reference(path):
    trace = load_file(path)
    steps = find_steps(trace)
    timeline = gpu_timeline(trace, steps)
    # The step window in the file's own clock (trainprof's times are µs from its t0).
    shift = trace.t0_us - (trace.metadata.get("baseTimeNanoseconds") or 0) / 1000.0
    start, end = steps.span
    return timeline.device_span_idle_pct, device_span_idle_pct(path, (start + shift, end + shift))


@pytest.mark.parametrize("path", SHARED_TRACES, ids=lambda p: p.name[:32])
def test_device_span_idle_agrees_with_reference(path):
    ours, reference = _ours_and_reference(path)
    assert ours == pytest.approx(reference, abs=0.5)


def test_kernel_past_the_window_end_is_counted_whole(builder, tmp_path):
    """The V100 case: a kernel starting inside the step but ending after it (no launch link, as
    on a communication stream) lengthens the device span rather than being cut at the end."""
    builder.step(1, 0, 1000)
    builder.launch(10, 5, k_ts=100, k_dur=300)  # busy 100-400
    builder.kernel("ncclDevKernel_AllReduce_Sum_f32", 900, 600)  # 900-1500, past the step
    builder.kernel("late", 1200, 100)  # starts after the step: not in the span
    path = builder.write(tmp_path / "t.json")
    ours, reference = _ours_and_reference(path)
    # Span 100-1500 = 1400 µs, busy 300 + 600: idle 500 / 1400.
    assert reference == pytest.approx(500 / 1400 * 100)
    assert ours == pytest.approx(reference, abs=1e-6)


def test_kernel_from_before_the_window_is_left_out(builder, tmp_path):
    builder.kernel("leftover", -200, 300)  # starts before the step, runs into it
    builder.step(1, 0, 1000)
    builder.launch(10, 5, k_ts=400, k_dur=200)
    builder.launch(20, 5, k_ts=800, k_dur=200)
    path = builder.write(tmp_path / "t.json")
    ours, reference = _ours_and_reference(path)
    # Span 400-1000 = 600 µs, busy 400: idle 200 / 600.
    assert reference == pytest.approx(200 / 600 * 100)
    assert ours == pytest.approx(reference, abs=1e-6)
