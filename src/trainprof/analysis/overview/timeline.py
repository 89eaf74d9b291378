"""The GPU timeline over the analysed window: busy, idle, compute, communication, copies.

All device streams of the rank are merged. "Exposed" communication is communication time with no
compute kernel running; exposed memcpy is copy time with neither compute nor communication.
Percentages are of the window (first step start to last step end), except the overlap, which is
the share of communication time hidden under compute (HTA's definition).
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows, launch_links
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.structs import Record
from trainprof.trace.model import DEVICE_KINDS, FLAG_COMM, Kind, Trace


class Timeline(Record):
    span_ms: float
    busy_pct: float
    idle_pct: float
    compute_pct: float
    communication_pct: float
    exposed_communication_pct: float
    memcpy_pct: float
    exposed_memcpy_pct: float
    comm_comp_overlap_pct: float | None  # None when the window has no communication
    #: The same idle and compute shares over the device span only: the device events launched
    #: inside the steps as recorded (ProfilerStep, not re-timed), from the first start to the
    #: last end (not cut at the window's end), HTA's and TraceLens's denominator.
    device_span_ms: float
    device_span_idle_pct: float
    device_span_compute_pct: float


class DeviceSets(msgspec.Struct):
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
        return iv.clip(iv.union(ev.ts[mask], event_ends(ev)[mask]), start, end)

    compute, communication, memcpy = merged(kernels & ~comm), merged(kernels & comm), merged(copies)
    busy = iv.join(iv.join(compute, communication), memcpy)
    return DeviceSets(compute, communication, memcpy, busy)


def device_span_members(trace: Trace, start: float, end: float) -> np.ndarray:
    """The device events of the device span of the recorded steps [start, end): those whose
    launch starts inside it (HTA's rule); one with no correlation id at all, by its own start;
    one whose correlation id has no launch in the trace was launched before the recording."""
    ev = trace.events
    dev_idx, launch_idx = launch_links(trace)
    when = np.where(ev.correlation < 0, ev.ts, np.nan)
    when[dev_idx] = ev.ts[launch_idx]
    with np.errstate(invalid="ignore"):
        return ev.of_kind(*DEVICE_KINDS) & (when >= start) & (when < end)


def device_span_sets(trace: Trace, start: float, end: float) -> DeviceSets:
    """The activity of the device span's events (``device_span_members``), whole (not
    clipped to the window)."""
    ev = trace.events
    inside = device_span_members(trace, start, end)
    comm = ev.flagged(FLAG_COMM) & inside
    kernels = (ev.kind == Kind.KERNEL) & inside
    copies = ev.of_kind(Kind.MEMCPY, Kind.MEMSET) & inside

    def merged(mask: np.ndarray) -> iv.Intervals:
        return iv.union(ev.ts[mask], event_ends(ev)[mask])

    compute, communication, memcpy = merged(kernels & ~comm), merged(kernels & comm), merged(copies)
    busy = iv.join(iv.join(compute, communication), memcpy)
    return DeviceSets(compute, communication, memcpy, busy)


class _TimelinePart(msgspec.Struct):
    """Sums over one window's region (see ``_timeline_part``)."""

    has_gpu: bool
    busy: float = 0.0
    compute: float = 0.0
    communication: float = 0.0
    exposed_communication: float = 0.0
    memcpy: float = 0.0
    exposed_memcpy: float = 0.0
    span_busy: float = 0.0
    span_compute: float = 0.0
    span_first: float = math.inf
    span_last: float = -math.inf


def _clipped(s: iv.Intervals, lo: float, hi: float) -> iv.Intervals:
    """``s`` inside [lo, hi); unchanged when the bounds are infinite."""
    return s if lo == -math.inf and hi == math.inf else iv.clip(s, lo, hi)


def _timeline_part(window: Window) -> _TimelinePart:
    """The window's share: device activity clipped to its region (and the step span); the
    device span's activity (events starting in the step span, whole) clipped to the region."""
    trace = window.trace
    part = _TimelinePart(has_gpu=trace.has_gpu)
    start, end = window.span
    if not part.has_gpu or end - start <= 0:
        return part
    lo, hi = max(start, window.region[0]), min(end, window.region[1])
    if hi > lo:
        s = device_sets(trace, lo, hi)
        part.busy = s.busy.total()
        part.compute = s.compute.total()
        part.communication = s.communication.total()
        part.exposed_communication = iv.subtract(s.communication, s.compute).total()
        part.memcpy = s.memcpy.total()
        part.exposed_memcpy = iv.subtract(iv.subtract(s.memcpy, s.compute),
                                          s.communication).total()
    d = device_span_sets(trace, *window.recorded_span)
    if len(d.busy):
        part.span_first, part.span_last = float(d.busy.starts[0]), float(d.busy.ends[-1])
    part.span_busy = _clipped(d.busy, *window.region).total()
    part.span_compute = _clipped(d.compute, *window.region).total()
    return part


def _timeline_whole(parts: list[_TimelinePart], steps: StepWindows) -> Timeline | None:
    if not any(p.has_gpu for p in parts):
        return None
    start, end = steps.span
    span = end - start
    if span <= 0:
        return None

    def total(name: str) -> float:
        return sum(getattr(p, name) for p in parts)

    comm_total, exposed_comm = total("communication"), total("exposed_communication")
    busy = total("busy")
    first = min(p.span_first for p in parts)
    last = max(p.span_last for p in parts)
    dev_span = float(last - first) if math.isfinite(first) else 0.0

    def dev_pct(x: float) -> float:
        return x / dev_span * 100.0 if dev_span > 0 else 0.0

    def pct(x: float) -> float:
        return x / span * 100.0

    return Timeline(
        span_ms=span / 1000.0,
        busy_pct=pct(busy),
        idle_pct=pct(span - busy),
        compute_pct=pct(total("compute")),
        communication_pct=pct(comm_total),
        exposed_communication_pct=pct(exposed_comm),
        memcpy_pct=pct(total("memcpy")),
        exposed_memcpy_pct=pct(total("exposed_memcpy")),
        comm_comp_overlap_pct=(
            (comm_total - exposed_comm) / comm_total * 100.0 if comm_total > 0 else None
        ),
        device_span_ms=dev_span / 1000.0,
        device_span_idle_pct=dev_pct(dev_span - total("span_busy")),
        device_span_compute_pct=dev_pct(total("span_compute")),
    )


#: The timeline figures, or None for a trace without device activity; called as
#: ``gpu_timeline(trace, steps)`` or window by window (analysis/streaming/windows.py).
gpu_timeline: WindowedSection[_TimelinePart, Timeline | None] = WindowedSection(
    _timeline_part, _timeline_whole, cost=0.85)
