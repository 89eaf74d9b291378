"""Per-device GPU figures: utilisation, estimated SM efficiency and occupancy, Tensor Core share.

Definitions follow the TensorBoard plugin so that numbers compare: all are measured over the
step window (first step start to last step end); see docs/metrics.md.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import FLAG_COMM, Kind, Trace

# Kernel names that run on Tensor Cores. The plugin's list (from NVIDIA PyProf) plus modern
# names: CUTLASS "tensorop", Ampere/Hopper shapes (s16816, h16816, i16832), wgmma/gmma (Hopper),
# nvjet (cuBLAS on Hopper), xmma, flash attention, cuDNN v8 "sm80_xmma", and bf16/fp16 gemm
# variants from cuBLASLt that carry an MMA tile tag. Triton template kernels (``triton_tem_*``:
# Inductor's mm, bmm, addmm, convolution and flex-attention templates) are built on ``tl.dot``.
_TENSOR_CORE = re.compile(
    r"h884|s884|h1688|s1688|c1688|i8816|16816|16832|hmma|imma|bmma|dmma|tensorop|wgmma|gmma_"
    r"|nvjet|xmma|dgrad_1x1_stride_2x2|first_layer_wgrad_kernel|conv1x1|conv2d_c1_k1"
    r"|direct_group|flash_fwd|flash_bwd|flash::|flash_attn|fmha|_mma_|mma_sync|triton_tem_"
    r"|sm90_gemm|sm80_gemm|ampere_.*gemm.*(?:bf16|fp16|h16)|cutlass.*(?:bf16|f16|tf32)",
    re.IGNORECASE,
)
#: Names that say the kernel runs on the CUDA cores although the family above matches: cuBLAS's
#: FP32 ``sm80_xmma_gemm_f32f32_..._ffma_...`` (TF32 off), CUTLASS ``simt`` and ``sgemm`` kernels.
_CUDA_CORES = re.compile(r"ffma|simt|sgemm", re.IGNORECASE)


def uses_tensor_cores(kernel_name: str) -> bool:
    """Whether a kernel name says it runs on Tensor Cores (a name heuristic, see docs)."""
    return bool(_TENSOR_CORE.search(kernel_name)) and not _CUDA_CORES.search(kernel_name)


@dataclass
class GpuFigures:
    """Figures for one device over the step window, in percent."""

    device: int
    utilization_pct: float
    sm_efficiency_pct: float | None
    achieved_occupancy_pct: float | None
    tensor_core_pct: float

    def to_dict(self) -> dict:
        return asdict(self)


def gpu_figures(trace: Trace, steps: StepWindows) -> list[GpuFigures]:
    """One entry per device that ran kernels."""
    ev = trace.events
    start, end = steps.span
    window = end - start
    kernels = ev.kind == Kind.KERNEL
    tc_names = np.array([uses_tensor_cores(n) for n in ev.names], dtype=bool)
    out = []
    for device in trace.devices:
        mine = kernels & (ev.device == device)
        if not mine.any():
            continue
        ts, te = ev.ts[mine], ev.end[mine]
        busy = iv.clip(iv.union(ts, te), start, end).total()
        util = busy / window * 100.0 if window > 0 else 0.0

        bps = ev.blocks_per_sm[mine].astype(np.float64)
        has_bps = np.isfinite(bps) & (bps > 0)
        sm_eff = None
        if has_bps.any() and window > 0:
            points, level = iv.weighted_union(ts[has_bps], te[has_bps], bps[has_bps], cap=1.0)
            sm_eff = iv.weighted_total(points, level, start, end) / window * 100.0

        occ = ev.occupancy[mine].astype(np.float64)
        has_occ = np.isfinite(occ) & (occ >= 0)
        occupancy = None
        if has_occ.any():
            clipped = np.clip(te[has_occ], start, end) - np.clip(ts[has_occ], start, end)
            if clipped.sum() > 0:
                occupancy = float((occ[has_occ] * clipped).sum() / clipped.sum())

        dur = ev.dur[mine]
        compute = ~ev.flagged(FLAG_COMM)[mine]
        total = float(dur[compute].sum())
        tc = float(dur[compute & tc_names[ev.name[mine]]].sum())
        out.append(
            GpuFigures(
                device=device,
                utilization_pct=util,
                sm_efficiency_pct=sm_eff,
                achieved_occupancy_pct=occupancy,
                tensor_core_pct=tc / total * 100.0 if total > 0 else 0.0,
            )
        )
    return out
