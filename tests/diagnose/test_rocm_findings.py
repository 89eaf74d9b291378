"""AMD (ROCm) traces: matrix-core kernels, dtype-aware advice, fixes that match the bound.

No MI300 can record here, so the traces are built in the format PyTorch's Kineto writes on ROCm
(roctracer/rocprofiler-sdk, PyTorch 2.x): HIP API calls under ``cuda_runtime`` named
``hipLaunchKernel`` (PyTorch's own kernels) and ``hipExtModuleLaunchKernel`` (Triton, Tensile
and MIOpen code objects), kernels named as MI300X traces show them (``attn_fwd.kd``,
``Cijk_..._MI32x32x8x1_...``, ``igemm_fwd_gtcx3_...``), ops with ``Input Dims`` /
``Input type`` / ``Concrete Inputs`` (``record_shapes=True``), and ``deviceProperties`` as
Kineto fills them from ``hipGetDeviceProperties`` (gfx942: compute capability 9.4, 304 CUs).
"""

from __future__ import annotations

import pytest

import trainprof
from trainprof.diagnose.rules.gpu import TC_SPEEDUP
from trainprof.diagnose.rules.hardware import FASTER_KERNELS, FUSE_POINTWISE

from helpers.tracegen import TraceBuilder

MI300X = {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 205_822_885_888,
          "computeMajor": 9, "computeMinor": 4, "maxThreadsPerBlock": 1024,
          "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
          "regsPerMultiprocessor": 65536, "warpSize": 64, "sharedMemPerBlock": 65536,
          "sharedMemPerMultiprocessor": 65536, "numSms": 304, "sharedMemPerBlockOptin": 0}
BF16, FP32 = "c10::BFloat16", "float"
STEP_US, ATTN_US, STEPS = 2000.0, 1000.0, 3
#: q, k, v of [B, H, S, D] = [4, 16, 2048, 128]: 2 * B * H * S * S * 2D = 137.4 GFLOP.
QKV = [4, 16, 2048, 128]


def _rocm_builder() -> TraceBuilder:
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [MI300X]
    b.stream = 0
    return b


def _kernel_args(grid: int) -> dict:
    return {"kernel": "", "grid dim": [grid, 1, 1], "workgroup dim": [256, 1, 1]}


def sdpa_trace(dtype: str, kernel: str) -> TraceBuilder:
    """Per 2000 µs step: SDPA (``aten::scaled_dot_product_attention`` over
    ``aten::_scaled_dot_product_flash_attention``) launching ``kernel`` for 1000 µs through
    hipExtModuleLaunchKernel, and an elementwise add through hipLaunchKernel."""
    b = _rocm_builder()
    dims = [QKV, QKV, QKV, [], [], [], []]
    for n in range(STEPS):
        t = n * STEP_US
        b.step(n, t, STEP_US)
        b.op("aten::scaled_dot_product_attention", t + 10, 40, args={
            "Input Dims": dims, "Input type": [dtype] * 3 + ["", "Scalar", "Scalar", ""],
            "Concrete Inputs": ["", "", "", "", "0.", "False", ""]})
        op = b.op("aten::_scaled_dot_product_flash_attention", t + 12, 36, args={
            "Input Dims": dims,
            "Input type": [dtype] * 3 + ["Scalar", "Scalar", "Scalar", ""],
            "Concrete Inputs": ["", "", "", "0.", "False", "False", ""]})
        b.launch(t + 20, 10, name=kernel, k_ts=t + 50, k_dur=ATTN_US,
                 launcher="hipExtModuleLaunchKernel", external_id=op["args"]["External id"],
                 args=_kernel_args(1024))
        add = b.op("aten::add", t + 60, 20, args={
            "Input Dims": [QKV, QKV, []], "Input type": [dtype, dtype, "Scalar"]})
        b.launch(t + 65, 5, name="void at::native::vectorized_elementwise_kernel<4, "
                 "at::native::CUDAFunctor_add<c10::BFloat16>>", k_ts=t + 1100, k_dur=100,
                 launcher="hipLaunchKernel", external_id=add["args"]["External id"],
                 args=_kernel_args(4096))
    return b


def _analyse(b: TraceBuilder, tmp_path):
    return trainprof.analyze(b.write(tmp_path / "mi300.json"))


def _by_id(analysis) -> dict:
    return {f.id: f for f in analysis.findings}


def test_bf16_flash_attention_on_mi300_is_on_matrix_cores_and_gets_no_autocast(tmp_path):
    """The bf16 SDPA of an MI300X: ``attn_fwd.kd`` runs on the matrix cores, so no
    no_tensor_cores finding (main said "do not use Tensor Cores ... bf16/fp16 autocast");
    the attention is compute-bound and far from its roofline, and its fix is a compute fix."""
    a = _analyse(sdpa_trace(BF16, "attn_fwd.kd"), tmp_path)
    rows = {r.name: r for r in a.ranks[0].sections.kernels.rows}
    attn = rows["attn_fwd.kd"]
    assert (attn.kernel_class, attn.classified_by) == ("tensor_core", "name")
    found = _by_id(a)
    assert "no_tensor_cores" not in found
    assert not any("autocast" in f.fix.summary for f in a.findings)
    far = found["far_from_roofline"]
    bound = next(e.what for e in far.evidence if e.what.startswith("attention_fwd"))
    assert "(compute-bound)" in bound
    assert far.fix == FASTER_KERNELS and far.fix != FUSE_POINTWISE


def test_an_unknown_kernel_of_a_bf16_op_gets_no_autocast_advice(tmp_path):
    """Whatever the kernel's name, an op whose inputs are already bf16 is not told to autocast:
    the op's ``Input type`` decides."""
    a = _analyse(sdpa_trace(BF16, "my_attention_kernel"), tmp_path)
    facts = a.ranks[0].sections.kernels.facts
    assert facts.tc_eligible_narrow_us == pytest.approx(STEPS * ATTN_US)
    assert facts.tc_eligible_fp32_off_tc_us == 0
    assert "no_tensor_cores" not in _by_id(a)


def test_fp32_attention_off_the_matrix_cores_is_no_tensor_cores_said_for_amd(tmp_path):
    """The same op in fp32 with a non-MMA kernel: the finding fires, says "matrix cores", and
    saves (1 - 1/TC_SPEEDUP) of the kernel time, as a share of the steps."""
    a = _analyse(sdpa_trace(FP32, "my_attention_kernel"), tmp_path)
    f = _by_id(a)["no_tensor_cores"]
    assert "matrix cores" in f.title and "Tensor Cores" not in f.title
    assert "autocast" in f.fix.summary
    expected = STEPS * ATTN_US * (1 - 1 / TC_SPEEDUP) / (STEPS * STEP_US) * 100
    assert f.saving_pct == pytest.approx(expected)


def test_mi300_resnet_kernels_are_classified_by_their_miopen_families(tmp_path):
    """An MI300 ResNet step: MIOpen's XDLOPS implicit GEMM is matrix-core work, its cast and
    batch norm kernels are known compute (main: the igemm kernel unclassified, the cast kernel
    a Tensor Core one)."""
    b = _rocm_builder()
    conv = "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_" \
           "1x4x1x64_tb1x8x2x1_1x4x1x64_gkgs"
    kernels = [("aten::miopen_convolution", conv, 600.0, "hipExtModuleLaunchKernel"),
               ("aten::miopen_batch_norm", "MIOpenBatchNormFwdTrainSpatial", 150.0,
                "hipExtModuleLaunchKernel"),
               ("aten::copy_", "SubTensorOpWithCastTensor1d", 50.0, "hipExtModuleLaunchKernel")]
    for n in range(STEPS):
        t = n * 1000.0
        b.step(n, t, 1000.0)
        at = t + 10
        for op_name, kernel, dur, launcher in kernels:
            op = b.op(op_name, at, 20)
            b.launch(at + 5, 5, name=kernel, k_ts=at + 50, k_dur=dur, launcher=launcher,
                     external_id=op["args"]["External id"], args=_kernel_args(512))
            at += dur + 60
    stats = _analyse(b, tmp_path).ranks[0].sections.kernels
    classes = {r.name: (r.kernel_class, r.classified_by) for r in stats.rows}
    assert classes == {conv: ("tensor_core", "name"),
                       "MIOpenBatchNormFwdTrainSpatial": ("compute", "name"),
                       "SubTensorOpWithCastTensor1d": ("compute", "name")}
    assert stats.tensor_core_pct == pytest.approx(600 / (600 + 150 + 50) * 100)
    assert stats.classes.unclassified_us == 0
