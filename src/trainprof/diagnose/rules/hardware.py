"""Rules about how far the work runs from what the hardware can do: ops against their roofline,
collectives against the link (analysis/roofline/section.py, analysis/roofline/collectives.py)."""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.roofline.section import RooflineRow
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import (
    rank_finding,
    readable_us,
    share_of_steps,
    where,
)
from trainprof.diagnose.rules.distributed import uses_ddp
from trainprof.diagnose.rules.parallelism import GENERIC_COMM, comm_fix
from trainprof.lazy import LazyPattern

# far_from_roofline: op classes under FAR_PCT of their roofline; the saving assumes they could
# reach REACHABLE_PCT of it (well-tuned libraries reach 70-80% on large shapes); it fires when
# that saving is at least MIN_SAVING_PCT of the step time.
FAR_PCT = 50.0
REACHABLE_PCT = 70.0
MIN_SAVING_PCT = 2.0
# Tensor Core friendly sizes: every GEMM dimension a multiple of this many elements (cuBLAS:
# 16 bytes, i.e. 8 for bf16/fp16, 16 for fp8, 4 for fp32/TF32).
ALIGN_BYTES = 16
# A GEMM under this many FLOPs per call cannot fill a modern GPU (2 x 256^3).
TINY_GEMM_FLOPS = 2 * 256**3
# slow_collectives: collectives whose bus bandwidth is under SLOW_BUSBW_PCT of the link peak,
# taking at least MIN_SAVING_PCT of the step; the saving assumes TARGET_BUSBW_PCT of the peak
# (nccl-tests reach 70-90% on large messages), at most the exposed communication time.
SLOW_BUSBW_PCT = 25.0
TARGET_BUSBW_PCT = 60.0
# Messages under this size are latency-bound: fewer, larger collectives help.
SMALL_MESSAGE_BYTES = 1 << 20

_DIMS = LazyPattern(r"\b([MNK])=(\d+)")
_ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

ALIGN_DIMS = Fix(
    summary="Pad GEMM dimensions (hidden size, vocabulary, batch x sequence) to multiples of 8 "
            "elements for bf16/fp16 (16 for fp8, 64 for the best tiles) so Tensor Core kernels "
            "run without ragged tiles.",
    pytorch=(
        "batch = tokenizer(texts, padding=True, pad_to_multiple_of=8)   # tokens: M\n"
        "model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)   # vocabulary"
    ),
)
TF32_OR_BF16 = Fix(
    summary="Run the FP32 GEMMs on Tensor Cores: TF32 for what stays in fp32, bf16 autocast "
            "for the rest.",
    pytorch="torch.backends.cuda.matmul.allow_tf32 = True\n"
            "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = loss_fn(model(x), y)",
    accelerate="accelerator = Accelerator(mixed_precision='bf16')",
)
FUSE_ATTENTION = Fix(
    summary="Use fused attention (scaled_dot_product_attention) instead of matmul + softmax + "
            "matmul.",
    pytorch="out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)",
)
BATCH_SMALL = Fix(
    summary="Batch or fuse the tiny GEMMs and the memory-bound ops around them "
            "(torch.compile, grouped GEMMs, a larger batch) so each kernel has work for the "
            "whole GPU.",
    pytorch="model = torch.compile(model)",
)
FUSE_POINTWISE = Fix(
    summary="Fuse the memory-bound chains (norms, activations, residual adds) so the tensors "
            "are read once: torch.compile, or fused kernels (fused LayerNorm/RMSNorm).",
    pytorch="model = torch.compile(model)",
)
FASTER_KERNELS = Fix(
    summary="These ops are compute-bound: their kernels, not memory traffic, are slow. Try the "
            "other attention and GEMM backends (SDPA's flash, memory-efficient or cuDNN "
            "kernels; Composable Kernel or aiter on ROCm), let torch.compile tune the GEMMs "
            "(max-autotune), and keep shapes in multiples of the kernels' tiles.",
    pytorch="model = torch.compile(model, mode='max-autotune')\n"
            "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
            "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):\n"
            "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)",
)
#: Small messages in a DDP job (the rank's parallelism section says ddp); other jobs get the
#: fix of their parallelism (rules/parallelism.py comm_fix), else the generic one.
BIGGER_BUCKETS = Fix(
    summary="Send fewer, larger collectives: larger DDP buckets, and communication overlapped "
            "with compute.",
    pytorch="model = DDP(model, bucket_cap_mb=100, gradient_as_bucket_view=True)",
    accelerate="from accelerate.utils import DistributedDataParallelKwargs\n"
               "accelerator = Accelerator(kwargs_handlers=[\n"
               "    DistributedDataParallelKwargs(bucket_cap_mb=100)])",
)
CHECK_FABRIC = Fix(
    summary="Large collectives run far under the link: check that NCCL uses NVLink / "
            "InfiniBand (NCCL_DEBUG=INFO shows the transport; NCCL_P2P_DISABLE or "
            "NCCL_IB_DISABLE must not be set), that every rank reaches the collective at the "
            "same time (a straggler's wait counts as collective time), and overlap it with "
            "compute.",
    pytorch="NCCL_DEBUG=INFO torchrun ...   # look for 'via P2P/NVLink' or 'NET/IB'",
)


def _small_messages_fix(r: RankAnalysis) -> Fix:
    """DDP's bucket advice only for DDP; otherwise the fix of the job's parallelism."""
    if uses_ddp(r):
        return BIGGER_BUCKETS
    return comm_fix(r) or GENERIC_COMM


def _misaligned(shape: str, dtype: str) -> list[str]:
    """The GEMM dimensions of a shape label that are not Tensor Core aligned."""
    per = max(ALIGN_BYTES // _ELEMENT_BYTES.get(dtype, 2), 1)
    return [f"{d}={v}" for d, v in _DIMS.findall(shape) if int(v) % per]


def far_from_roofline(r: RankAnalysis) -> Finding | None:
    roof = r.sections.roofline
    if roof is None or roof.device is None or not roof.classes:
        return None
    far = [c for c in roof.classes if c.pct_of_roofline is not None
           and c.pct_of_roofline < FAR_PCT]
    # The figures of a row with pct_of_roofline are all set (analysis/roofline/section.py).
    gain_us = sum(max(c.time_us - (c.roofline_us or 0.0) * 100.0 / REACHABLE_PCT, 0.0)
                  for c in far)
    saving = share_of_steps(r, gain_us)
    if saving < MIN_SAVING_PCT:
        return None
    names = {c.op_class for c in far}
    shapes = [s for s in roof.shapes if s.op_class in names and s.lost_us]
    evidence = [Evidence(f"{c.op_class}: % of roofline ({c.bound}-bound)", c.pct_of_roofline or 0.0,
                         "%", where(r, f"{readable_us(c.lost_us or 0.0)} lost, {c.calls} calls"))
                for c in far[:3]]
    evidence += [Evidence(f"{s.op} {s.shape} {s.dtype}", s.pct_of_roofline or 0.0, "% of roofline",
                          where(r, f"{s.achieved_tflops:.1f} TFLOP/s, {s.achieved_tb_s:.2f} "
                                   f"TB/s, {readable_us(s.lost_us or 0.0)} lost"))
                 for s in shapes[:3]]
    evidence.append(Evidence("device", roof.device.name, "", roof.device_source or ""))
    fix = _roofline_fix(far, shapes, evidence, r)
    worst = far[0]
    return rank_finding(
        r, "far_from_roofline", saving_severity(saving),
        f"{worst.op_class} ops run at {worst.pct_of_roofline:.0f}% of what the "
        f"{roof.device.name} allows ({readable_us(worst.lost_us or 0.0)} lost)",
        "Against the device's peak FLOP/s and memory bandwidth, the kernels of these ops take "
        "much longer than their FLOPs and bytes need: the shapes, the dtype or the split into "
        "many small kernels keep the GPU from its roofline.",
        evidence, saving, f"the ops reach {REACHABLE_PCT:g}% of their roofline", fix,
        shapes=[s.to_dict() for s in shapes[:5]],
    )


def _roofline_fix(far: list[RooflineRow], shapes: list[RooflineRow], evidence: list[Evidence],
                  r: RankAnalysis) -> Fix:
    """The fix that fits the worst shapes: alignment, FP32 GEMMs, unfused attention, tiny
    GEMMs, else the fix of the bound the worst op class is at (faster kernels when it is
    compute-bound, fusing the memory-bound ops when it is memory-bound)."""
    gemms = [s for s in shapes if s.op_class == "gemm"]
    misaligned = [(s, _misaligned(s.shape, s.dtype)) for s in gemms[:5]]
    misaligned = [(s, dims) for s, dims in misaligned if dims]
    fp32 = [s for s in gemms if s.dtype == "fp32" and s.ceiling == "fp32"]
    tiny = [s for s in gemms if s.calls and s.flops / s.calls < TINY_GEMM_FLOPS]
    if any(c.op_class == "softmax" for c in far[:2]):
        evidence.append(Evidence("softmax outside fused attention", "yes", "", where(r)))
        return FUSE_ATTENTION
    if fp32:
        evidence.append(Evidence("FP32 GEMMs not on Tensor Cores", len(fp32), "shapes",
                                 where(r)))
        return TF32_OR_BF16
    if misaligned:
        s, dims = misaligned[0]
        evidence.append(Evidence("GEMM dims not Tensor Core aligned", ", ".join(dims), "",
                                 where(r, f"{s.op} {s.shape}")))
        return ALIGN_DIMS
    if tiny:
        evidence.append(Evidence("tiny GEMM shapes (under 2x256^3 FLOPs a call)", len(tiny),
                                 "shapes", where(r)))
        return BATCH_SMALL
    return FASTER_KERNELS if far[0].bound == "compute" else FUSE_POINTWISE


def slow_collectives(r: RankAnalysis) -> Finding | None:
    coll = r.sections.collectives
    comm = r.sections.communication
    if coll is None or not coll.rows:
        return None
    slow = [c for c in coll.rows if c.pct_of_peak is not None and c.pct_of_peak < SLOW_BUSBW_PCT]
    if not slow:
        return None
    gain_us = sum(max(c.time_us - c.time_us * (c.pct_of_peak or 0.0) / TARGET_BUSBW_PCT, 0.0)
                  for c in slow)
    exposed = comm.exposed_us if comm is not None else gain_us
    saving = share_of_steps(r, min(gain_us, exposed))
    if saving < MIN_SAVING_PCT:
        return None
    time_us = sum(c.time_us for c in slow)
    small_us = sum(c.time_us for c in slow if c.bytes < SMALL_MESSAGE_BYTES)
    evidence = [Evidence(f"{c.type} of {c.bytes / 2**20:.2f} MiB over {c.group_size} ranks",
                         c.busbw_gb_s, "GB/s busbw",
                         where(r, f"{c.pct_of_peak:.1f}% of {c.peak_gb_s:g} GB/s {c.link}, "
                                  f"{c.count} calls, {readable_us(c.time_us)}"))
                for c in slow[:4]]
    evidence.append(Evidence("collective time under the threshold", time_us / 1000, "ms",
                             where(r, "whole window")))
    evidence.append(Evidence("communication not hidden by compute", exposed / 1000, "ms",
                             where(r)))
    fix = _small_messages_fix(r) if small_us >= time_us / 2 else CHECK_FABRIC
    worst = slow[0]
    return rank_finding(
        r, "slow_collectives", saving_severity(saving),
        f"Collectives reach {worst.pct_of_peak:.0f}% of the {worst.link} bandwidth "
        f"({worst.type}, {worst.busbw_gb_s:.1f} GB/s bus bandwidth)",
        "The collectives move their bytes far slower than the link allows (bus bandwidth, "
        "nccl-tests' measure, against the device's link): small messages pay the latency, and a "
        "collective's time also holds the wait for the last rank to arrive.",
        evidence, saving, f"the slow collectives reach {TARGET_BUSBW_PCT:g}% of the link, "
        "saving at most the communication not hidden by compute", fix,
    )
