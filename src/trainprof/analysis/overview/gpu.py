"""Per-device GPU figures: utilisation, estimated SM efficiency and occupancy, Tensor Core share.

Definitions follow the TensorBoard plugin so that numbers compare: all are measured over the
step window (first step start to last step end); see docs/metrics.md.
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.structs import Record
from trainprof.trace.kernel_class import KernelClass, uses_tensor_cores
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.model import FLAG_COMM, Kind

__all__ = ["GpuFigures", "gpu_figures", "uses_tensor_cores"]

class GpuFigures(Record):
    """Figures for one device over the step window, in percent."""

    device: int
    utilization_pct: float
    sm_efficiency_pct: float | None
    achieved_occupancy_pct: float | None
    tensor_core_pct: float


class _DevicePart(msgspec.Struct):
    """One device's sums over one window's region (see ``_gpu_part``)."""

    busy: float = 0.0
    sm_busy: float = 0.0
    has_blocks: bool = False
    occupancy_sum: float = 0.0
    occupancy_time: float = 0.0
    has_occupancy: bool = False
    compute_us: float = 0.0
    tensor_core_us: float = 0.0


def _gpu_part(window: Window) -> dict[int, _DevicePart]:
    """Per device, its figures' sums over the window's region: times clipped to the region
    (and to the span of all steps), kernels counted in the window where they start."""
    trace = window.trace
    ev = trace.events
    start, end = window.span
    lo, hi = max(start, window.region[0]), min(end, window.region[1])
    kernels = ev.kind == Kind.KERNEL
    owned = (ev.ts >= window.region[0]) & (ev.ts < window.region[1])
    on_tc = kernel_classes(trace).cls == KernelClass.TENSOR_CORE
    out: dict[int, _DevicePart] = {}
    for device in trace.devices:
        mine = kernels & (ev.device == device)
        if not (mine & owned).any():
            continue
        part = out[device] = _DevicePart()
        ts, te = ev.ts[mine], event_ends(ev)[mine]
        if hi > lo:
            part.busy = iv.clip(iv.union(ts, te), lo, hi).total()
        bps = ev.blocks_per_sm[mine].astype(np.float64)
        has_bps = np.isfinite(bps) & (bps > 0)
        if has_bps.any() and end > start:
            part.has_blocks = True
            if hi > lo:
                points, level = iv.weighted_union(ts[has_bps], te[has_bps], bps[has_bps],
                                                  cap=1.0)
                part.sm_busy = iv.weighted_total(points, level, lo, hi)
        mine_owned = owned[mine]
        occ = ev.occupancy[mine].astype(np.float64)
        has_occ = np.isfinite(occ) & (occ >= 0) & mine_owned
        if has_occ.any():
            part.has_occupancy = True
            clipped = np.clip(te[has_occ], start, end) - np.clip(ts[has_occ], start, end)
            part.occupancy_sum = float((occ[has_occ] * clipped).sum())
            part.occupancy_time = float(clipped.sum())
        dur = ev.dur[mine]
        compute = ~ev.flagged(FLAG_COMM)[mine] & mine_owned
        part.compute_us = float(dur[compute].sum())
        part.tensor_core_us = float(dur[compute & on_tc[mine]].sum())
    return out


def _gpu_whole(parts: list[dict[int, _DevicePart]], steps: StepWindows) -> list[GpuFigures]:
    start, end = steps.span
    window = end - start
    out = []
    for device in sorted({d for p in parts for d in p}):
        mine = [p[device] for p in parts if device in p]
        busy = sum(p.busy for p in mine)
        sm_eff = None
        if any(p.has_blocks for p in mine) and window > 0:
            sm_eff = sum(p.sm_busy for p in mine) / window * 100.0
        occupancy = None
        occ_time = sum(p.occupancy_time for p in mine)
        if any(p.has_occupancy for p in mine) and occ_time > 0:
            occupancy = float(sum(p.occupancy_sum for p in mine) / occ_time)
        total = sum(p.compute_us for p in mine)
        tc = sum(p.tensor_core_us for p in mine)
        out.append(
            GpuFigures(
                device=device,
                utilization_pct=busy / window * 100.0 if window > 0 else 0.0,
                sm_efficiency_pct=sm_eff,
                achieved_occupancy_pct=occupancy,
                tensor_core_pct=tc / total * 100.0 if total > 0 else 0.0,
            )
        )
    return out


#: One entry per device that ran kernels, over the step span (first step start to last step
#: end); called as ``gpu_figures(trace, steps)`` or window by window (analysis/streaming/windows.py).
gpu_figures: WindowedSection[dict[int, _DevicePart], list[GpuFigures]] = WindowedSection(
    _gpu_part, _gpu_whole, cost=0.21)
