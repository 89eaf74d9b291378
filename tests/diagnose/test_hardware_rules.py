"""far_from_roofline and slow_collectives on synthetic traces with known answers."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.diagnose.rules.hardware import REACHABLE_PCT, TARGET_BUSBW_PCT

from helpers.paths import NCCL_TRACE, NS_TRACE, TIMESFORMER
from helpers.tracegen import TraceBuilder

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 80 * 10**9,
        "computeMajor": 9, "computeMinor": 0, "numSms": 132}


def _findings(b: TraceBuilder, tmp_path) -> dict:
    b.metadata["deviceProperties"] = [H100]
    return {f.id: f for f in trainprof.analyze(b.write(tmp_path / "t.json")).findings}


def _gemm_steps(b: TraceBuilder, k: int, dtype: str, kernel_us: float, step_us: float,
                steps: int = 3) -> None:
    for n in range(steps):
        t = n * step_us
        b.step(n, t, step_us)
        op = b.op("aten::mm", t + 5, kernel_us + 20, args={
            "Input Dims": [[4096, k], [k, 4096]], "Input type": [dtype, dtype]})
        b.launch(t + 10, 5, k_ts=t + 15, k_dur=kernel_us, name="gemm_kernel",
                 external_id=op["args"]["External id"])
        _wait_for_device(b, t + 16, t + 15 + kernel_us)


def _wait_for_device(b: TraceBuilder, start: float, device_end: float) -> None:
    """The host waits for the device's work before the step ends (as a loss.item() does), so
    that the device work is on the step's critical path (diagnose/path_bounds.py caps a
    saving by it): the host alone in its step, idle and unrecorded, would set the step time."""
    b.event("cuda_runtime", "cudaDeviceSynchronize", start, device_end + 1 - start)


def test_a_slow_misaligned_gemm_is_far_from_roofline(builder, tmp_path):
    """4096 x 4095 x 4096 bf16: 137.4 GFLOP, 138.9 µs at 989.5 TFLOP/s; it takes 1000 µs of a
    1200 µs step. Reaching 70% of the roofline saves 1000 - 138.9 / 0.7 µs per step."""
    _gemm_steps(builder, 4095, "c10::BFloat16", 1000.0, 1200.0)
    f = _findings(builder, tmp_path)["far_from_roofline"]
    flops = 2 * 4096 * 4096 * 4095
    ideal = flops / 989.5e6
    assert f.saving_pct == pytest.approx((1000 - ideal / (REACHABLE_PCT / 100)) / 1200 * 100)
    assert f.severity == "high"
    assert "K=4095" in " ".join(str(e.value) for e in f.evidence)
    assert "multiples of 8" in f.fix.summary
    assert f.extra["shapes"][0]["shape"] == "M=4096 N=4096 K=4095"


def test_an_fp32_gemm_under_its_fp32_peak_gets_the_tf32_fix(builder, tmp_path):
    """fp32 at 17 TFLOP/s: under the fp32 peak (67), so the fp32 roof bounds it (26%)."""
    _gemm_steps(builder, 4096, "float", 8000.0, 10000.0)
    f = _findings(builder, tmp_path)["far_from_roofline"]
    assert "TF32" in f.fix.summary
    assert f.evidence[0].value == pytest.approx(2 * 4096**3 / 67e6 / 8000 * 100)


def test_a_gemm_near_its_roofline_does_not_fire(builder, tmp_path):
    _gemm_steps(builder, 4096, "c10::BFloat16", 160.0, 400.0)  # 139 / 160 = 87%
    assert "far_from_roofline" not in _findings(builder, tmp_path)


def _all_reduces(b: TraceBuilder, kernel_us: float, step_us: float = 10000.0) -> None:
    """Each step: one 256 MiB bf16 all-reduce over 8 ranks, alone on the GPU."""
    for n in range(3):
        t = n * step_us
        b.step(n, t, step_us)
        b.op("record_param_comms", t + 5, 50, args={
            "Collective name": "allreduce", "In msg nelems": 128 * 2**20,
            "Out msg nelems": 128 * 2**20, "Group size": 8, "dtype": "BFloat16"})
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=kernel_us,
                 name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage)")
        _wait_for_device(b, t + 60, t + 20 + kernel_us)


def test_a_slow_all_reduce_is_slow_collectives(builder, tmp_path):
    """256 MiB in 8 ms over 8 ranks: busbw = 268 MB/ms x 1.75 = 58.7 GB/s, 13% of NVLink's
    450 GB/s per direction; at 60% it would take 8000 x 13.0 / 60 µs."""
    _all_reduces(builder, 8000.0)
    f = _findings(builder, tmp_path)["slow_collectives"]
    busbw = 256 * 2**20 / 8000 / 1e3 * 1.75
    pct = busbw / 450 * 100
    assert f.evidence[0].value == pytest.approx(busbw)
    gain = 8000 - 8000 * pct / TARGET_BUSBW_PCT
    assert f.saving_pct == pytest.approx(gain / 10000 * 100)
    assert "NVLink" in f.fix.summary  # a large message: the fabric, not the bucket size


def test_a_fast_all_reduce_does_not_fire(builder, tmp_path):
    _all_reduces(builder, 1200.0)  # 391 GB/s busbw, 87% of the link
    assert "slow_collectives" not in _findings(builder, tmp_path)


def test_timesformer_softmax_is_far_from_roofline_and_gets_fused_attention():
    """timesformer on its H100: the unfused attention's softmax runs at 20% of its (memory)
    roofline and loses 55 ms; the fix is fused attention."""
    found = {f.id: f for f in trainprof.analyze(TIMESFORMER).findings}
    f = found["far_from_roofline"]
    assert f.title.startswith("softmax ops run at 20%")
    assert 15 < f.saving_pct < 30 and f.severity == "high"
    assert "scaled_dot_product_attention" in f.fix.summary


def test_a100_ddp_all_reduces_are_slow_collectives_capped_by_exposed_time():
    """The 2 x A100 rank: all-reduces at 0.7-3.7% of NVLink; the saving is capped at its
    exposed communication, the time communication_exposed reports: one saving, shared."""
    found = {f.id: f for f in trainprof.analyze(NCCL_TRACE).findings}
    f = found["slow_collectives"]
    assert f.saving_pct == pytest.approx(found["communication_exposed"].saving_pct)
    assert f.extra["saving_shared_with"] == "communication_exposed"
    assert all(e.value < 0.25 * 300 for e in f.evidence if e.unit == "GB/s busbw")


def test_traces_without_shapes_or_sizes_get_neither_finding():
    found = {f.id for f in trainprof.analyze(NS_TRACE).findings}
    assert not {"far_from_roofline", "slow_collectives"} & found


def _ops_steps(b: TraceBuilder, name: str, dims: list, types: list, kernel_us: float,
               calls: int, step_us: float = 1000.0) -> None:
    for n in range(3):
        t = n * step_us
        b.step(n, t, step_us)
        for i in range(calls):
            at = t + 10 + i * (kernel_us + 20)
            op = b.op(name, at, kernel_us + 15, args={"Input Dims": dims, "Input type": types})
            b.launch(at + 2, 3, k_ts=at + 6, k_dur=kernel_us, name="k",
                     external_id=op["args"]["External id"])


def test_tiny_gemms_get_the_batching_fix(builder, tmp_path):
    """Twenty 64x64x64 GEMMs of 20 µs each per step: 0.5 MFLOP, far under 2 x 256^3."""
    _ops_steps(builder, "aten::mm", [[64, 64], [64, 64]], ["c10::BFloat16"] * 2, 20.0, 20)
    f = _findings(builder, tmp_path)["far_from_roofline"]
    assert "Batch or fuse the tiny GEMMs" in f.fix.summary
    assert any(e.what.startswith("tiny GEMM shapes") for e in f.evidence)


def test_slow_elementwise_gets_the_fusion_fix(builder, tmp_path):
    """A 64 MiB bf16 add in 400 µs: 201 MB / 400 µs = 0.5 TB/s, 15% of 3.35 TB/s."""
    x = [32, 1024, 1024]
    _ops_steps(builder, "aten::add", [x, x, []], ["c10::BFloat16"] * 2 + ["Scalar"], 400.0, 1)
    f = _findings(builder, tmp_path)["far_from_roofline"]
    nbytes = 3 * 32 * 2**20 * 2
    assert f.evidence[0].value == pytest.approx(nbytes / 3.35e6 / 400 * 100)
    assert "memory-bound chains" in f.fix.summary


def test_unknown_device_gets_no_roofline_finding(builder, tmp_path):
    _gemm_steps(builder, 4095, "c10::BFloat16", 1000.0, 1200.0)
    builder.metadata["deviceProperties"] = [{**H100, "name": "Mystery Accelerator"}]
    analysis = trainprof.analyze(builder.write(tmp_path / "t.json"))
    assert "far_from_roofline" not in {f.id for f in analysis.findings}
