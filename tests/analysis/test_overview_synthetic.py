"""The overview on synthetic traces whose answers are known by construction."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.analysis.overview.steps import find_steps
from trainprof.trace.load import load_file

from helpers.tracegen import OLD, TraceBuilder


def one_step(b: TraceBuilder):
    """Step of 100 µs: data 0-20, op 20-60 launching a kernel on 30-70, memcpy 65-80."""
    b.step(1, 0, 100)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20)
    b.op("aten::mm", 20, 40)
    b.launch(25, 5, name="volta_sgemm_128x64_nn", k_ts=30, k_dur=40,
             args={"blocks per SM": 0.5, "est. achieved occupancy %": 40})
    b.launch(60, 5, kind="memcpy", name="Memcpy HtoD (Pageable -> Device)", k_ts=65, k_dur=15,
             args={"bytes": 1_000_000})
    return b


@pytest.mark.parametrize("spelling", ["new", "old"])
def test_breakdown_claims_in_priority_order(tmp_path, spelling):
    b = one_step(TraceBuilder(spelling=dict(OLD) if spelling == "old" else TraceBuilder().spelling))
    rank = trainprof.analyze(b.write(tmp_path / "t.json")).ranks[0]
    assert rank.steps.count == 1 and rank.steps.mean_ms == pytest.approx(0.1)
    bd = rank.breakdown_pct
    # kernel 30-70 (40), memcpy 70-80 after the kernel claims its part (10), runtime 25-30
    # outside the kernel (5; 60-65 is under the kernel), data 0-20 (20), CPU exec 20-25 (5),
    # other 80-100 (20).
    assert bd == pytest.approx({"kernel": 40, "memcpy": 10, "memset": 0, "communication": 0,
                                "runtime": 5, "dataloader": 20, "cpu_exec": 5, "other": 20})
    gpu = rank.gpu
    assert gpu.utilization_pct == pytest.approx(40)
    assert gpu.sm_efficiency_pct == pytest.approx(0.5 * 40)
    assert gpu.achieved_occupancy_pct == pytest.approx(40)
    assert gpu.tensor_core_pct == 0


def test_step_is_retimed_to_device_end(tmp_path, builder):
    builder.step(1, 0, 50)
    builder.op("aten::mm", 10, 20)
    builder.launch(12, 3, k_ts=20, k_dur=100)  # the kernel runs until 120, after the host step
    builder.step(2, 50, 50)
    builder.launch(60, 3, k_ts=125, k_dur=10)  # queued behind the first kernel
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert list(steps.numbers) == [1, 2]
    assert steps.starts[0] == 0 and steps.ends[0] == 120
    assert steps.starts[1] == 120 and steps.ends[1] == 135


def test_uncaptured_tail_step_is_dropped(tmp_path, builder):
    for n in range(3):
        builder.step(n, n * 100, 100)
        launches = 5 if n < 2 else 1  # the last step lost most of its kernels
        for k in range(launches):
            builder.launch(n * 100 + 10 + k * 10, 2, k_dur=3)
    trace = load_file(builder.write(tmp_path / "t.json"))
    steps = find_steps(trace)
    assert list(steps.numbers) == [0, 1]
    assert any("Dropped the last 1 step" in note for note in steps.notes)


def test_whole_trace_window_without_steps(tmp_path, builder):
    builder.op("aten::add", 0, 30)
    builder.op("aten::mul", 40, 60)
    rank = trainprof.analyze(builder.write(tmp_path / "t.json")).ranks[0]
    assert rank.step_source == "whole trace"
    assert rank.steps.mean_ms == pytest.approx(0.1)
    assert any("whole trace" in n for n in rank.notes)
    assert rank.gpu is None and rank.timeline is None
    assert rank.breakdown_pct["cpu_exec"] == pytest.approx(90)
    assert rank.breakdown_pct["other"] == pytest.approx(10)


def test_exposed_communication_and_overlap(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>", 0, 50)
    builder.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", 40, 30)
    builder.kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t", 90, 10)
    rank = trainprof.analyze(builder.write(tmp_path / "t.json")).ranks[0]
    tl = rank.timeline
    assert tl.compute_pct == pytest.approx(50)
    assert tl.communication_pct == pytest.approx(40)
    assert tl.exposed_communication_pct == pytest.approx(30)  # 50-70 and 90-100
    assert tl.comm_comp_overlap_pct == pytest.approx(25)  # 10 of 40 µs hidden
    assert tl.idle_pct == pytest.approx(20)
    assert rank.breakdown_pct["communication"] == pytest.approx(30)
    assert rank.gpu.tensor_core_pct == pytest.approx(100)  # NCCL kernels are not compute


def test_cpu_only_phases(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10)
    builder.op("aten::linear", 10, 30)
    builder.op("autograd::engine::evaluate_function: AddmmBackward0", 45, 30)
    builder.annotation("Optimizer.step#SGD.step", 80, 15)
    rank = trainprof.analyze(builder.write(tmp_path / "t.json")).ranks[0]
    assert rank.phases_pct == pytest.approx(
        {"data": 10, "forward": 35, "backward": 30, "optimizer": 15, "other": 10}
    )
    assert sum(rank.phases_pct.values()) == pytest.approx(100)
