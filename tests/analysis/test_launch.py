"""Launch overhead: exact answers on synthetic traces, the verdict on real H100 traces."""

from __future__ import annotations

import json

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.launch import launch_stats
from trainprof.trace.load import load_file

from helpers.paths import BERT, TIMESFORMER


def _stats(builder, tmp_path):
    trace = load_file(builder.write(tmp_path / "launch.json"))
    return launch_stats(trace, find_steps(trace)), trace


def test_synthetic_exact_answers(builder, tmp_path):
    builder.step(1, 0, 1000)
    builder.op("aten::forward", 0, 1000)
    builder.launch(100, 10, k_ts=115, k_dur=5)  # delay 5, small, shorter than its launch
    builder.launch(130, 10, k_ts=150, k_dur=20)  # delay 10
    builder.launch(160, 5, k_ts=200, k_dur=100)  # returns while the previous kernel runs
    builder.launch(600, 10, k_ts=700, k_dur=8)  # 420 µs after the last: not back to back
    stats, trace = _stats(builder, tmp_path)
    assert (stats.launches, stats.kernels) == (4, 4)
    assert stats.launch_us.median == pytest.approx(10)
    assert stats.delay_us.median == pytest.approx((10 + 35) / 2)
    assert stats.delay_us.max == pytest.approx(90)
    assert stats.small_kernel_pct == pytest.approx(50)
    assert stats.shorter_than_launch_pct == pytest.approx(50)
    assert stats.starved_kernel_pct == pytest.approx(75)
    # Busy 5 + 20 + 100 + 8 = 133 of 1000; launching back to back over [100, 165], of which
    # the GPU idles 65 - 5 - 15 = 45.
    assert stats.gpu_idle_pct == pytest.approx(86.7)
    assert stats.cpu_bound_pct == pytest.approx(4.5)
    assert not stats.cpu_bound
    assert (stats.slow_launches, stats.late_starts) == (0, 0)
    assert [(a.name, a.calls) for a in stats.apis] == [("cudaLaunchKernel", 4)]
    d = json.loads(json.dumps(stats.to_dict()))
    assert "records" not in d and d["thresholds"]["small_kernel_us"] == 10
    pytest.importorskip("pandas")
    assert list(stats.to_pandas(trace)["delay_us"]) == [5, 10, 35, 90]


def test_tiny_kernels_launched_back_to_back_are_cpu_bound(builder, tmp_path):
    builder.step(1, 0, 600)
    for i in range(20):
        builder.launch(i * 30, 20, launcher="cuLaunchKernel", category="cuda_driver",
                       k_ts=i * 30 + 21, k_dur=2)
    stats, _ = _stats(builder, tmp_path)
    assert stats.gpu_idle_pct == pytest.approx(100 - 40 / 6)
    # Back to back over [0, 590]; 19 of the 2 µs kernels run inside it (the last at 591).
    assert stats.cpu_bound_pct == pytest.approx((590 - 19 * 2) / 6)
    assert stats.cpu_bound and stats.starved_kernel_pct == 100
    assert stats.apis[0].name == "cuLaunchKernel"


def test_no_launches(builder, tmp_path):
    builder.step(1, 0, 100)
    builder.op("aten::add", 0, 50)
    stats, _ = _stats(builder, tmp_path)
    assert stats.launches == 0 and stats.launch_us.median is None
    assert stats.small_kernel_pct is None and not stats.cpu_bound


@pytest.mark.parametrize("path, cpu_bound", [(BERT, True), (TIMESFORMER, False)])
def test_real_traces(path, cpu_bound):
    """bert-small at batch 1 idles the GPU on launches; timesformer keeps it busy."""
    trace = load_file(path)
    stats = launch_stats(trace, find_steps(trace))
    assert stats.cpu_bound is cpu_bound
    if cpu_bound:
        assert stats.small_kernel_pct > 90 and stats.starved_kernel_pct > 90
    else:
        assert stats.cpu_bound_pct < 5
