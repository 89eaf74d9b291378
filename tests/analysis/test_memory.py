"""Memory: a synthetic leak (new and old format), the 28k-event trace and the old ResNet trace."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.memory import memory
from trainprof.analysis.sections.memory_series import downsample
from trainprof.trace.load import load_file

from helpers.paths import BIG_TRACE, RESNET_W0

MB = 1_000_000
GB16 = 16_000_000_000


def leaking_trace(b, old: bool = False):
    """Four steps of 100 µs. Each allocates 5 MB in aten::mm (the peak of the step) and frees
    3 MB: 2 MB stay behind per step. 100 MB were allocated before the trace started."""
    b.metadata["deviceProperties"] = [{"id": 0, "name": "GPU", "totalGlobalMem": GB16}]
    level = 100 * MB
    for n in range(4):
        t0 = n * 100
        b.step(n, t0, 100)
        b.op("aten::mm", t0 + 10, 20)
        b.op("aten::empty", t0 + 12, 2)  # the allocation happens in here: charged to aten::mm
        level += 5 * MB
        b.memory(t0 + 13, 5 * MB, None if old else level, reserved=level + 50 * MB)
        b.op("aten::add", t0 + 50, 10)
        level -= 3 * MB
        b.memory(t0 + 55, -3 * MB, None if old else level, reserved=level + 50 * MB)
    return b


def test_new_format_leak(tmp_path, builder):
    trace = load_file(leaking_trace(builder).write(tmp_path / "t.json"))
    (d,) = memory(trace, find_steps(trace)).devices
    assert d.device == "cuda:0" and d.has_totals and d.events == 8
    assert d.peak_allocated == 100 * MB + 4 * 2 * MB + 3 * MB  # the last step's 5 MB peak
    assert d.peak_above_start == 11 * MB
    assert (d.peak_step, d.peak_op, d.peak_op_path) == (3, "aten::mm", ["aten::mm"])
    assert d.peak_ms == pytest.approx(0.313)
    assert [e.allocated for e in d.step_end_allocated] == [102 * MB, 104 * MB, 106 * MB, 108 * MB]
    assert d.growth_mb_per_step == pytest.approx(2.0)
    assert d.rising_share == 1.0 and d.leak_suspected
    assert d.reserved_at_peak == d.peak_allocated + 50 * MB
    assert d.reserved_to_allocated == pytest.approx((111 + 50) / 111)
    assert d.device_total == GB16 and d.headroom == GB16 - (111 + 50) * MB
    assert not d.near_capacity
    assert [(o.op, o.allocations, o.bytes) for o in d.top_ops] == [("aten::mm", 4, 20 * MB)]


def test_old_format_says_what_it_cannot_compute(tmp_path, builder):
    trace = load_file(leaking_trace(builder, old=True).write(tmp_path / "t.json"))
    result = memory(trace, find_steps(trace))
    (d,) = result.devices
    assert not d.has_totals
    assert d.peak_allocated is None and d.headroom is None and d.reserved_at_peak is None
    assert d.peak_above_start == 11 * MB  # exact relative to the trace start
    assert (d.peak_step, d.peak_op) == (3, "aten::mm")
    assert d.growth_mb_per_step == pytest.approx(2.0) and d.leak_suspected
    assert "relative to the trace start" in result.notes[0]
    assert result.to_dict()["devices"][0]["peak_allocated"] is None


def test_steady_memory_is_no_leak(tmp_path, builder):
    level = 10 * MB
    for n in range(4):
        builder.step(n, n * 100, 100)
        builder.op("aten::mm", n * 100 + 10, 20)
        builder.memory(n * 100 + 12, MB, level + MB)
        builder.memory(n * 100 + 20, -MB, level)
    trace = load_file(builder.write(tmp_path / "t.json"))
    (d,) = memory(trace, find_steps(trace)).devices
    assert d.growth_mb_per_step == 0 and not d.leak_suspected


def test_downsample_keeps_extremes():
    rng = np.random.default_rng(1)
    values = rng.normal(size=100_000).cumsum()
    keep = downsample(values, None, 1000)
    assert len(keep) <= 1000 and np.all(np.diff(keep) > 0)
    assert values.argmax() in keep and values.argmin() in keep
    assert keep[0] == 0 and keep[-1] == len(values) - 1


def test_big_trace_new_format():
    trace = load_file(BIG_TRACE)
    result = memory(trace, find_steps(trace))
    assert sum(d.events for d in result.devices) == 28_010 and result.notes == []
    cpu, gpu = result.devices
    assert (cpu.device, gpu.device) == ("cpu", "cuda:1")
    assert gpu.peak_allocated == 6_629_508_096 and gpu.peak_reserved == 12_782_141_440
    assert gpu.device_total == 34_089_730_048
    assert gpu.peak_pct_of_device == pytest.approx(19.45, abs=0.01)
    assert gpu.peak_step == 2 and gpu.peak_op == "aten::clone"
    assert gpu.peak_op_path[0].startswith("autograd::engine::evaluate_function")
    assert not gpu.leak_suspected and gpu.growth_mb_per_step == pytest.approx(0, abs=1e-6)
    assert gpu.top_ops[0].op == "aten::mul"
    assert len(gpu.curve.ms) <= 1000 and max(gpu.curve.allocated) == gpu.peak_allocated
    assert cpu.reserved_at_peak is None  # the CPU allocator reserves nothing


def test_resnet_old_format():
    trace = load_file(RESNET_W0)
    result = memory(trace, find_steps(trace))
    cpu, gpu = result.devices
    assert not gpu.has_totals and gpu.peak_allocated is None and gpu.headroom is None
    assert gpu.peak_above_start == 2_791_636_480
    assert gpu.peak_op == "aten::cudnn_convolution_backward_weight"
    assert gpu.device_total == 34_084_028_416  # known, but no peak to compare with
    assert result.notes[0].startswith("cpu, cuda:0: old-format") and not gpu.leak_suspected
    assert len(gpu.curve.ms) <= 1000


def test_no_memory_events(tmp_path, builder):
    builder.step(1, 0, 100)
    trace = load_file(builder.write(tmp_path / "t.json"))
    result = memory(trace, find_steps(trace))
    assert result.devices == [] and "profile_memory" in result.notes[0]
