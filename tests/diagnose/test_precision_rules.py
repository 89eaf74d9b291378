"""wide_precision and no_tensor_cores on GPU traces with known answers: one place for fp64
(wide_precision, on the kernel time of fp64 ops), one for fp32 matmuls (no_tensor_cores)."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.diagnose.rules.precision import FP64_SPEEDUP

from helpers.tracegen import TraceBuilder

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 80 * 10**9,
        "computeMajor": 9, "computeMinor": 0, "numSms": 132}
STEP_US, GEMM_US, STEPS = 2000.0, 800.0, 3


def _gemm_trace(dtype: str, kernel: str) -> TraceBuilder:
    """Per 2000 µs step, ``aten::linear`` over ``aten::addmm`` in ``dtype`` launching an
    800 µs ``kernel`` (the outermost typed op is the linear)."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [H100]
    for n in range(STEPS):
        t = n * STEP_US
        b.step(n, t, STEP_US)
        args = {"Input Dims": [[4096, 1024], [1024, 1024], [1024]],
                "Input type": [dtype, dtype, dtype]}
        b.op("aten::linear", t + 5, 40, args=args)
        op = b.op("aten::addmm", t + 10, 30, args={
            "Input Dims": [[1024], [4096, 1024], [1024, 1024], [], []],
            "Input type": [dtype, dtype, dtype, "Scalar", "Scalar"]})
        b.launch(t + 15, 5, name=kernel, k_ts=t + 50, k_dur=GEMM_US,
                 external_id=op["args"]["External id"])
    return b


def _findings(b: TraceBuilder, tmp_path) -> dict:
    return {f.id: f for f in trainprof.analyze(b.write(tmp_path / "t.json")).findings}


def test_fp64_gemms_on_a_gpu_are_wide_precision_not_no_tensor_cores(tmp_path):
    """cuBLAS's double GEMM under a double linear: wide_precision on its kernel time; no
    autocast advice from no_tensor_cores (main: no_tensor_cores, and nothing about fp64)."""
    found = _findings(_gemm_trace("double", "void gemm_kernel_double<128, 64>(double*)"),
                      tmp_path)
    assert "no_tensor_cores" not in found
    f = found["wide_precision"]
    share = STEPS * GEMM_US / (STEPS * STEP_US) * 100
    assert f.evidence[0].what == "step time in fp64 ops (kernel time)"
    assert f.evidence[0].value == pytest.approx(share)
    assert f.saving_pct == pytest.approx(share * (1 - 1 / FP64_SPEEDUP))
    assert any(e.what == "fp64 op aten::linear" for e in f.evidence)


def test_fp32_gemms_on_a_gpu_are_no_tensor_cores_not_wide_precision(tmp_path):
    found = _findings(_gemm_trace("float", "void gemm_kernel_float<128, 64>(float*)"),
                      tmp_path)
    assert "wide_precision" not in found
    assert "autocast" in found["no_tensor_cores"].fix.summary
