"""Rules about the precision the model computes in: fp64 where training needs fp32 or less.

fp32 matmuls on a GPU with Tensor Cores are no_tensor_cores' finding (rules/gpu.py): this
module judges fp64, on the CPU and on the GPU alike.
"""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.operators import OperatorStats
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import (
    rank_finding,
    readable_us,
    share_of_steps,
    step_evidence,
    where,
)

# wide_precision: ops whose every floating-point input is fp64 (analysis/calls/precision.py)
# take at least FP64_MIN_PCT of the step time (host time on a CPU run, kernel time on a GPU).
FP64_MIN_PCT = 1.0
#: Assumed speed-up of those ops in fp32: 2x on a CPU (twice the SIMD lanes per instruction,
#: half the bytes). On a GPU at least as much (half the bytes; data-center GPUs have half or
#: equal fp64 peaks, others 1/32-1/64): a floor. The saving is (1 - 1/FP64_SPEEDUP) of their time.
FP64_SPEEDUP = 2.0
#: fp64 ops named in the evidence.
TOP_FP64_OPS = 3

FLOAT32 = Fix(
    summary=(
        "Train in float32 (or lower): convert the model and the batches once. NumPy arrays "
        "are float64, and torch.from_numpy keeps their dtype; a float64 default dtype or a "
        "model.double() does the same to every parameter."
    ),
    pytorch=(
        "model = model.float()\n"
        "x = torch.from_numpy(array).float()   # or dataset arrays .astype(np.float32)\n"
        "torch.set_default_dtype(torch.float32)   # if something set float64"
    ),
    accelerate=(
        "model = model.float()   # before accelerator.prepare(model, optimizer, loader)\n"
        "x = torch.from_numpy(array).float()"
    ),
)


def wide_precision(r: RankAnalysis) -> Finding | None:
    ops = r.sections.operators
    if ops is None or not ops.fp64_ops:
        return None
    on_gpu = r.gpu is not None and any(o.device_us > 0 for o in ops.fp64_ops)
    time_us = sum(o.device_us if on_gpu else o.host_us for o in ops.fp64_ops)
    share = share_of_steps(r, time_us)
    if share < FP64_MIN_PCT:
        return None
    saving = share * (1.0 - 1.0 / FP64_SPEEDUP)
    clock = "kernel" if on_gpu else "host"
    evidence = [
        Evidence(f"step time in fp64 ops ({clock} time)", share, "%", where(r)),
        Evidence("fp64 ops per step", sum(o.calls for o in ops.fp64_ops) / max(r.steps.count, 1),
                 "", where(r, "outermost ops whose floating-point inputs are all float64")),
        *_top_ops(r, ops, on_gpu),
        step_evidence(r),
    ]
    return rank_finding(
        r, "wide_precision", saving_severity(saving),
        f"The model computes in float64: {share:.0f}% of the step runs in fp64 ops",
        "The ops' recorded input types are double: the model and its batches are float64 "
        "(a NumPy array through torch.from_numpy, model.double(), or a float64 default "
        "dtype). Training needs float32 at most, which does the same work at about twice "
        "the speed on a CPU and many times it on most GPUs.",
        evidence, saving, f"the fp64 ops run {FP64_SPEEDUP:g}x faster in fp32 (a floor on GPUs)",
        FLOAT32,
    )


def _top_ops(r: RankAnalysis, ops: OperatorStats, on_gpu: bool) -> list[Evidence]:
    """The heaviest fp64 ops with their time and, where recorded, their call site."""
    sites = {row.name: s.source for row in ops.rows for s in row.call_sites[:1] if s.source}
    steps = max(r.steps.count, 1)
    return [Evidence(f"fp64 op {o.name}", readable_us((o.device_us if on_gpu else o.host_us)
                                                      / steps), "per step",
                     where(r, f"{o.calls} calls", *([f"called from {sites[o.name]}"]
                                                    if o.name in sites else [])))
            for o in ops.fp64_ops[:TOP_FP64_OPS]]
