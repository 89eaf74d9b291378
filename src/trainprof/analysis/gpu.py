"""Per-device GPU figures: utilisation, estimated SM efficiency and occupancy, Tensor Core share.

Definitions follow the TensorBoard plugin so that numbers compare: all are measured over the
step window (first step start to last step end); see docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.steps import StepWindows
from trainprof.trace.kernel_class import KernelClass, uses_tensor_cores
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.model import FLAG_COMM, Kind, Trace

__all__ = ["GpuFigures", "gpu_figures", "uses_tensor_cores"]

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
    on_tc = kernel_classes(trace).cls == KernelClass.TENSOR_CORE
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
        tc = float(dur[compute & on_tc[mine]].sum())
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
