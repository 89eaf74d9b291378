"""The GPU timeline over the analysed window: busy, idle, compute, communication, copies.

All device streams of the rank are merged. "Exposed" communication is communication time with no
compute kernel running; exposed memcpy is copy time with neither compute nor communication.
Percentages are of the window (first step start to last step end), except the overlap, which is
the share of communication time hidden under compute (HTA's definition).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import FLAG_COMM, Kind, Trace


@dataclass
class Timeline:
    span_ms: float
    busy_pct: float
    idle_pct: float
    compute_pct: float
    communication_pct: float
    exposed_communication_pct: float
    memcpy_pct: float
    exposed_memcpy_pct: float
    comm_comp_overlap_pct: float | None  # None when the window has no communication
    #: The same idle and compute shares over the device span only: the device events that start
    #: inside the window, from the first start to the last end (not cut at the window's end),
    #: HTA's and TraceLens's denominator, for cross-checks.
    device_span_ms: float
    device_span_idle_pct: float
    device_span_compute_pct: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class DeviceSets:
    """The merged device activity of a rank, clipped to a window."""

    compute: iv.Intervals
    communication: iv.Intervals
    memcpy: iv.Intervals
    busy: iv.Intervals


def device_sets(trace: Trace, start: float, end: float) -> DeviceSets:
    """Compute, communication and copy activity of every device of the rank inside [start, end)."""
    ev = trace.events
    comm = ev.flagged(FLAG_COMM)
    kernels = ev.kind == Kind.KERNEL
    copies = ev.of_kind(Kind.MEMCPY, Kind.MEMSET)

    def merged(mask: np.ndarray) -> iv.Intervals:
        return iv.clip(iv.union(ev.ts[mask], ev.end[mask]), start, end)

    compute, communication, memcpy = merged(kernels & ~comm), merged(kernels & comm), merged(copies)
    busy = iv.join(iv.join(compute, communication), memcpy)
    return DeviceSets(compute, communication, memcpy, busy)


def device_span_sets(trace: Trace, start: float, end: float) -> DeviceSets:
    """The activity of the device events that start inside [start, end), whole (not clipped)."""
    ev = trace.events
    inside = (ev.ts >= start) & (ev.ts < end)
    comm = ev.flagged(FLAG_COMM) & inside
    kernels = (ev.kind == Kind.KERNEL) & inside
    copies = ev.of_kind(Kind.MEMCPY, Kind.MEMSET) & inside

    def merged(mask: np.ndarray) -> iv.Intervals:
        return iv.union(ev.ts[mask], ev.end[mask])

    compute, communication, memcpy = merged(kernels & ~comm), merged(kernels & comm), merged(copies)
    busy = iv.join(iv.join(compute, communication), memcpy)
    return DeviceSets(compute, communication, memcpy, busy)


def gpu_timeline(trace: Trace, steps: StepWindows) -> Timeline | None:
    """The timeline figures, or None for a trace without device activity."""
    if not trace.has_gpu:
        return None
    start, end = steps.span
    span = end - start
    if span <= 0:
        return None
    s = device_sets(trace, start, end)
    comm_total = s.communication.total()
    exposed_comm = iv.subtract(s.communication, s.compute).total()
    exposed_copy = iv.subtract(iv.subtract(s.memcpy, s.compute), s.communication).total()
    busy = s.busy.total()
    d = device_span_sets(trace, start, end)
    dev_span = float(d.busy.ends[-1] - d.busy.starts[0]) if len(d.busy) else 0.0

    def dev_pct(x: float) -> float:
        return x / dev_span * 100.0 if dev_span > 0 else 0.0

    def pct(x: float) -> float:
        return x / span * 100.0

    return Timeline(
        span_ms=span / 1000.0,
        busy_pct=pct(busy),
        idle_pct=pct(span - busy),
        compute_pct=pct(s.compute.total()),
        communication_pct=pct(comm_total),
        exposed_communication_pct=pct(exposed_comm),
        memcpy_pct=pct(s.memcpy.total()),
        exposed_memcpy_pct=pct(exposed_copy),
        comm_comp_overlap_pct=(
            (comm_total - exposed_comm) / comm_total * 100.0 if comm_total > 0 else None
        ),
        device_span_ms=dev_span / 1000.0,
        device_span_idle_pct=dev_pct(dev_span - d.busy.total()),
        device_span_compute_pct=dev_pct(d.compute.total()),
    )
