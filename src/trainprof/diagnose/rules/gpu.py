"""Rules about how well the kernels use the GPU: filling the SMs, Tensor Cores, fused attention."""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.kernels import KernelFacts
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import rank_finding, share_of_steps, where

# low_occupancy: most kernel time in launches with fewer blocks than the SMs free to them (SMs
# held by a concurrent communication kernel are not free; persistent kernels are full: see
# analysis/sections/occupancy.py), and memory to spare (peak below this share of the device, or unknown).
UNDERFILLED_PCT = 50.0
MEMORY_TO_SPARE_PCT = 80.0
# no_tensor_cores: on compute capability >= 7, at least this share of kernel time comes from
# ops that could use Tensor Cores, and under TC_LOW_PCT of that time runs on them.
TC_MIN_COMPUTE_CAPABILITY = 7
TC_ELIGIBLE_MIN_PCT = 20.0
TC_LOW_PCT = 10.0
#: Assumed speed-up of eligible kernels on Tensor Cores (AMP end to end, well below the
#: hardware's 8-16x peak ratio): the saving is (1 - 1/TC_SPEEDUP) of their time.
TC_SPEEDUP = 2.0
# attention_not_fused: softmax kernels take at least this share of kernel time, and fused
# attention kernels less than FUSED_ATTENTION_MAX_PCT.
SOFTMAX_MIN_PCT = 5.0
FUSED_ATTENTION_MAX_PCT = 1.0
_SOFTMAX_OPS = ("aten::softmax", "aten::_softmax")

LARGER_BATCH = Fix(
    summary=(
        "The kernels are too small to fill the GPU: raise the batch size (or sequence "
        "length per step), or batch several requests together."
    ),
    pytorch="loader = DataLoader(dataset, batch_size=4 * bs, ...)   # and scale the lr",
    accelerate=(
        "loader = DataLoader(dataset, batch_size=4 * bs)\n"
        "accelerator = Accelerator(gradient_accumulation_steps=1)   # instead of accumulating"
    ),
)
MIXED_PRECISION = Fix(
    summary=(
        "Run matmuls and convolutions in reduced precision: bf16/fp16 autocast, and TF32 for "
        "what stays in fp32 (Ampere and newer)."
    ),
    pytorch=(
        "torch.backends.cuda.matmul.allow_tf32 = True\n"
        "torch.backends.cudnn.allow_tf32 = True\n"
        "with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "    loss = loss_fn(model(x), y)"
    ),
    accelerate="accelerator = Accelerator(mixed_precision='bf16')   # or 'fp16'",
)
FUSED_ATTENTION = Fix(
    summary=(
        "Use fused attention (scaled_dot_product_attention: flash or memory-efficient "
        "kernels) instead of matmul + softmax + matmul."
    ),
    pytorch=(
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
        "# Hugging Face models:\n"
        "model = AutoModel.from_pretrained(name, attn_implementation='sdpa')"
    ),
)


def _gpu_facts(r: RankAnalysis) -> KernelFacts | None:
    kernels = r.sections.kernels
    if r.gpu is None or kernels is None or kernels.facts.compute_us <= 0:
        return None
    return kernels.facts


def low_occupancy(r: RankAnalysis) -> Finding | None:
    f = _gpu_facts(r)
    if f is None or f.reported_blocks_us <= 0:
        return None
    share = f.underfilled_us / f.reported_blocks_us * 100.0
    memory = r.sections.memory
    peaks = [d.peak_pct_of_device for d in (memory.devices if memory is not None else [])
             if d.peak_pct_of_device is not None]
    if share < UNDERFILLED_PCT or (peaks and max(peaks) >= MEMORY_TO_SPARE_PCT):
        return None
    saving = share_of_steps(r, f.underfilled_empty_us)
    g = r.gpu
    if g is None:  # never: _gpu_facts needs one
        return None
    evidence = [
        Evidence("kernel time in launches with fewer blocks than free SMs", share, "%", where(r)),
        Evidence("SM time those launches leave empty", f.underfilled_empty_us / 1000, "ms",
                 where(r, "whole trace")),
        Evidence("estimated SM efficiency / GPU utilisation",
                 f"{g.sm_efficiency_pct or 0:.1f}% / {g.utilization_pct:.1f}%", "", where(r)),
        Evidence("peak memory of the device", max(peaks) if peaks else "unknown", "%" if peaks
                 else "", where(r)),
    ]
    return rank_finding(
        r, "low_occupancy", saving_severity(saving),
        f"{share:.0f}% of kernel time runs on part of the GPU (fewer blocks than free SMs)",
        "The kernels launch fewer thread blocks than the GPU has free multiprocessors, so part of "
        "the GPU sits empty while they run: the work per kernel (the batch) is too small.",
        evidence, saving, "per sample: the same samples, batched to fill every SM, take "
        "this much less GPU time (the SM time the launches now leave empty)",
        _larger_batch(peaks),
    )


def _larger_batch(peaks: list[float]) -> Fix:
    """The larger-batch fix, saying whether the memory allows it only when the peak is known."""
    if peaks:
        memory = (f" The memory allows it: the peak is {max(peaks):.0f}% of the device "
                  f"(under {MEMORY_TO_SPARE_PCT:.0f}%).")
    else:
        memory = (" The trace has no memory figures (record with profile_memory=True): "
                  "check that the larger batch fits.")
    return Fix(LARGER_BATCH.summary + memory, LARGER_BATCH.pytorch, LARGER_BATCH.accelerate)


def is_amd(r: RankAnalysis) -> bool:
    """Whether the rank ran on an AMD GPU (where Tensor Cores are called matrix cores)."""
    names = [r.device, *(str(d.get("name") or "") for d in r.environment.get("devices", []))]
    return any("amd" in n.lower() or "instinct" in n.lower() for n in names)


def matrix_units(r: RankAnalysis) -> str:
    """"Tensor Cores" (NVIDIA) or "matrix cores" (AMD), as the text of a finding says it."""
    return "matrix cores" if is_amd(r) else "Tensor Cores"


def no_tensor_cores(r: RankAnalysis) -> Finding | None:
    """fp32 (or untyped) matmuls and convolutions off the Tensor Cores. Ops whose inputs are
    already 16- or 8-bit are left out (autocast would change nothing), and so are fp64 ops
    (wide_precision's finding)."""
    f = _gpu_facts(r)
    majors = [d.get("computeMajor") or 0 for d in r.environment.get("devices", [])]
    if f is None or not majors or max(majors) < TC_MIN_COMPUTE_CAPABILITY:
        return None
    wide = f.tc_eligible_us - f.tc_eligible_narrow_us - f.tc_eligible_fp64_us
    off_tc = min(f.tc_eligible_fp32_off_tc_us, wide)
    eligible = wide / f.compute_us * 100.0
    on_tc = (wide - off_tc) / wide * 100.0 if wide > 0 else 0.0
    if eligible < TC_ELIGIBLE_MIN_PCT or on_tc >= TC_LOW_PCT or off_tc <= 0:
        return None
    compute = r.timeline.compute_pct if r.timeline is not None else 100.0
    saving = min(share_of_steps(r, off_tc * (1.0 - 1.0 / TC_SPEEDUP)), compute)
    units = matrix_units(r)
    evidence = [
        Evidence(f"kernel time of matmul/convolution ops not in 16/8-bit ({units} eligible)", eligible,
                 "%", where(r)),
        Evidence(f"of which on {units} kernels", on_tc, "%", where(r)),
        Evidence("compute capability", f"{max(majors)}.x", "", r.device),
        Evidence(f"{units} share of all kernel time",
                 r.gpu.tensor_core_pct if r.gpu is not None else "unknown", "%", where(r)),
    ]
    if f.tc_eligible_narrow_us > 0:
        evidence.append(Evidence("eligible ops already in bf16/fp16/fp8 (left out)",
                                 f.tc_eligible_narrow_us / f.compute_us * 100.0,
                                 "% of kernel time", where(r)))
    return rank_finding(
        r, "no_tensor_cores", saving_severity(saving),
        f"Matmuls and convolutions ({eligible:.0f}% of kernel time) do not use {units}",
        f"This GPU has {units}, but the kernels of the matrix multiplications and "
        "convolutions run on the ordinary FP32 units: the model runs in full precision.",
        evidence, saving, f"eligible kernels run {TC_SPEEDUP:g}x faster on {units} "
        "(bf16/fp16 autocast or TF32)", MIXED_PRECISION,
    )


def attention_not_fused(r: RankAnalysis) -> Finding | None:
    f = _gpu_facts(r)
    if f is None:
        return None
    softmax = f.softmax_us / f.compute_us * 100.0
    fused = f.fused_attention_us / f.compute_us * 100.0
    if softmax < SOFTMAX_MIN_PCT or fused >= FUSED_ATTENTION_MAX_PCT:
        return None
    saving = share_of_steps(r, f.softmax_us)
    ops = r.sections.operators
    sites = [s.source for row in (ops.rows if ops else []) if row.name in _SOFTMAX_OPS
             for s in row.call_sites if s.source]
    evidence = [
        Evidence("softmax kernel time", softmax, "% of kernel time", where(r)),
        Evidence("softmax kernels", f.softmax_calls / max(r.steps.count, 1), "per step",
                 where(r)),
        Evidence("fused attention kernels (flash, memory-efficient, cuDNN)", fused,
                 "% of kernel time", where(r)),
        *[Evidence("softmax called from", s, "", where(r)) for s in sites[:2]],
    ]
    return rank_finding(
        r, "attention_not_fused", saving_severity(saving),
        f"Attention is not fused: softmax kernels take {softmax:.0f}% of kernel time",
        "Attention runs as separate matmul, softmax and matmul kernels, writing and reading "
        "the whole score matrix; a fused attention kernel computes it on the fly.",
        evidence, saving, "a fused kernel removes the softmax pass; the matmuls remain",
        FUSED_ATTENTION,
    )
