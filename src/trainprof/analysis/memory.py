"""Memory per device from ``[memory]`` events: curve, peak and where, growth per step, headroom.

New-format events carry the allocator's ``Total Allocated``/``Total Reserved`` after each
allocation or free; old ones (PyTorch < 1.10) only ``Bytes``. For those, allocated memory is
rebuilt as a running sum of ``Bytes``, which is exact *relative to the trace start* (what was
allocated before the profiler started is unknown), so absolute peaks, reserved memory and
headroom are reported as unknown (None) and a note says so. See docs/memory.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis import tabular
from trainprof.analysis.frames import data_frame
from trainprof.analysis.memory_series import downsample, growth
from trainprof.analysis.nesting import HostRanges, enclosing_chain, innermost_on_any_thread
from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import LAUNCH_KINDS, Kind, Trace, is_allocation_op

#: Points kept of each curve for display (min and max per bucket, so peaks survive).
CURVE_POINTS = 1000
#: A peak above this share of the device's memory leaves too little headroom (plugin's rule).
HIGH_MEMORY_SHARE = 0.9
#: How many top allocating ops are listed per device.
TOP_OPS = 10
#: Host calls that ask the driver for device memory or give it back.
_ALLOCATOR_CALL = re.compile(
    r"^(?:cuda|hip)(?:Malloc|Free)(?:Async|Host|Managed)?$|^cuMem(?:Alloc|Free|Create|Map|Unmap"
    r"|Release)(?:_v2)?(?:Async)?$")
_OLD_FORMAT_NOTE = (
    "{devices}: old-format memory events (no Total Allocated/Reserved): allocated memory is "
    "shown relative to the trace start; the absolute peak, reserved memory and headroom "
    "cannot be computed."
)


@dataclass
class AllocatingOp:
    op: str
    allocations: int
    bytes: float

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "allocations": self.allocations, "bytes": self.bytes}


@dataclass
class DeviceMemory:
    """Memory figures of one device; bytes unless a name says otherwise."""

    device: str  # "cuda:0", "cpu"
    events: int
    has_totals: bool  # False: old format, allocated is relative to the trace start
    peak_allocated: float | None  # None in the old format
    peak_above_start: float  # peak minus what was allocated when the trace started
    peak_ms: float  # from the start of the step window
    peak_step: int | None
    peak_op: str | None
    peak_op_path: list[str]
    peak_reserved: float | None
    reserved_at_peak: float | None
    device_total: float | None
    step_end_allocated: list[tuple[int, float]]  # (step, allocated at its end)
    growth_mb_per_step: float | None
    rising_share: float | None
    leak_suspected: bool
    top_ops: list[AllocatingOp]
    curve_ms: np.ndarray
    curve_allocated: np.ndarray
    curve_reserved: np.ndarray | None

    @property
    def reserved_to_allocated(self) -> float | None:
        if self.reserved_at_peak is None or not self.peak_allocated:
            return None
        return self.reserved_at_peak / self.peak_allocated

    @property
    def headroom(self) -> float | None:
        if self.device_total is None or self.peak_reserved is None:
            return None
        return self.device_total - self.peak_reserved

    @property
    def peak_pct_of_device(self) -> float | None:
        if self.device_total is None or self.peak_allocated is None:
            return None
        return self.peak_allocated / self.device_total * 100.0

    @property
    def near_capacity(self) -> bool:
        pct = self.peak_pct_of_device
        return pct is not None and pct >= HIGH_MEMORY_SHARE * 100.0

    def summary(self) -> dict[str, Any]:
        """The scalar figures (everything but the curve and the lists)."""
        return {
            "device": self.device, "events": self.events, "has_totals": self.has_totals,
            "peak_allocated": self.peak_allocated, "peak_above_start": self.peak_above_start,
            "peak_ms": self.peak_ms, "peak_step": self.peak_step, "peak_op": self.peak_op,
            "peak_reserved": self.peak_reserved, "reserved_at_peak": self.reserved_at_peak,
            "reserved_to_allocated": self.reserved_to_allocated,
            "device_total": self.device_total, "headroom": self.headroom,
            "peak_pct_of_device": self.peak_pct_of_device, "near_capacity": self.near_capacity,
            "growth_mb_per_step": self.growth_mb_per_step, "rising_share": self.rising_share,
            "leak_suspected": self.leak_suspected,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "peak_op_path": self.peak_op_path,
            "step_end_allocated": [{"step": s, "allocated": a}
                                   for s, a in self.step_end_allocated],
            "top_ops": [o.to_dict() for o in self.top_ops],
            "curve": {
                "ms": self.curve_ms.tolist(),
                "allocated": self.curve_allocated.tolist(),
                "reserved": None if self.curve_reserved is None else self.curve_reserved.tolist(),
            },
        }


@dataclass
class AllocatorCalls:
    """Device allocator calls (``cudaMalloc``, ``cudaFree``...) that start inside the steps."""

    calls: int = 0
    time_us: float = 0.0
    per_step: float = 0.0
    time_pct: float | None = None  # of the step time
    names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "time_us": self.time_us, "per_step": self.per_step,
                "time_pct": self.time_pct, "names": self.names}


@dataclass
class Memory:
    devices: list[DeviceMemory]
    notes: list[str] = field(default_factory=list)
    allocator: AllocatorCalls = field(default_factory=AllocatorCalls)

    def device(self, name: str) -> DeviceMemory | None:
        return next((d for d in self.devices if d.device == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"units": "bytes", "devices": [d.to_dict() for d in self.devices],
                "allocator_calls": self.allocator.to_dict(), "notes": self.notes}

    def to_pandas(self) -> Any:
        """One row of scalar figures per device."""
        return data_frame([d.summary() for d in self.devices])


def memory(trace: Trace, steps: StepWindows) -> Memory:
    """Memory figures per device (none when the trace has no ``[memory]`` events)."""
    mem = trace.memory
    allocator = allocator_calls(trace, steps)
    if not len(mem):
        return Memory(devices=[], notes=["No [memory] events: record with profile_memory=True."],
                      allocator=allocator)
    ranges = _host_ranges(trace)
    owner = _allocating_op(trace, ranges)
    out = Memory(devices=[], allocator=allocator)
    first, group = tabular.group_ids(mem.device_type, mem.device_id)
    for g in np.lexsort((mem.device_id[first], mem.device_type[first])):
        d = _device(trace, steps, ranges, owner, np.flatnonzero(group == g),
                    int(mem.device_type[first[g]]), int(mem.device_id[first[g]]))
        out.devices.append(d)
    old = [d.device for d in out.devices if not d.has_totals]
    if old:
        out.notes.append(_OLD_FORMAT_NOTE.format(devices=", ".join(old)))
    return out


def allocator_calls(trace: Trace, steps: StepWindows) -> AllocatorCalls:
    """Device allocator calls inside the steps: the caching allocator asking the driver."""
    ev = trace.events
    launch = ev.of_kind(*LAUNCH_KINDS)
    names = np.unique(ev.name[launch])
    is_alloc = np.zeros(len(ev.names), dtype=bool)
    is_alloc[names] = [bool(_ALLOCATOR_CALL.match(ev.names[n])) for n in names]
    idx = np.flatnonzero(launch & is_alloc[ev.name])
    which = np.searchsorted(steps.starts, ev.ts[idx], side="right") - 1
    ok = which >= 0
    ok[ok] &= ev.ts[idx[ok]] < steps.ends[which[ok]]
    idx = idx[ok]
    if not len(idx):
        return AllocatorCalls()
    # Their time inside the steps (a call running past its step's end, or calls on several
    # threads at once, count once), so that it is never more than the steps.
    time = iv.intersect(iv.union(ev.ts[idx], ev.end[idx]),
                        iv.union(steps.starts, steps.ends)).total()
    step_time = float(steps.durations.sum())
    return AllocatorCalls(
        calls=len(idx), time_us=time, per_step=len(idx) / max(len(steps), 1),
        time_pct=time / step_time * 100.0 if step_time > 0 else None,
        names=sorted({ev.names[n] for n in ev.name[idx]}),
    )


def _label(device_type: int, device_id: int) -> str:
    if device_type == 0:
        return "cpu"
    if device_type == 1:
        return f"cuda:{device_id}"
    return f"device{device_type}:{device_id}"


def _host_ranges(trace: Trace) -> HostRanges:
    """Host ops that can own an allocation (not the allocator's own callers)."""
    ev = trace.events
    alloc = np.array([is_allocation_op(n) for n in ev.names], dtype=bool)
    idx = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION) & ~alloc[ev.name])
    return HostRanges.of(ev.ts[idx], ev.end[idx], ev.tid[idx], idx)


def _allocating_op(trace: Trace, ranges: HostRanges) -> np.ndarray:
    """Per memory event, the position in ``ranges`` of the op it happened in, or -1."""
    mem = trace.memory
    thread = getattr(mem, "tid", None)  # not every loader version records the thread
    if thread is not None:
        return ranges.innermost(mem.ts, thread)
    return innermost_on_any_thread(ranges, mem.ts)


def _device(trace: Trace, steps: StepWindows, ranges: HostRanges, owner: np.ndarray,
            idx: np.ndarray, device_type: int, device_id: int) -> DeviceMemory:
    mem = trace.memory
    ts, nbytes = mem.ts[idx], np.nan_to_num(mem.nbytes[idx])
    total = mem.total_allocated[idx]
    has_totals = bool(np.isfinite(total).any())
    if has_totals:
        keep = np.isfinite(total)
        idx, ts, nbytes, total = idx[keep], ts[keep], nbytes[keep], total[keep]
        allocated = total
        start_level = float(total[0] - nbytes[0])
        reserved = mem.total_reserved[idx]
        # The CPU allocator reserves nothing: all-zero totals mean "not tracked".
        recorded = np.isfinite(reserved).all() and bool(reserved.any())
        reserved = reserved if recorded else None
    else:
        allocated = np.cumsum(nbytes)
        start_level = 0.0
        reserved = None
    peak = int(np.argmax(allocated))
    window_start = steps.span[0]
    step = np.searchsorted(steps.starts, ts[peak], side="right") - 1
    in_step = step >= 0 and ts[peak] < steps.ends[step]
    pos = owner[idx[peak]]
    path = []
    if pos >= 0:
        chain = enclosing_chain(ranges, float(ts[peak]), int(ranges.thread[pos]))
        path = [trace.events.names[trace.events.name[ranges.index[c]]] for c in chain]
    points = downsample(allocated, reserved, CURVE_POINTS)
    label = _label(device_type, device_id)
    ends, slope, rising, leak = growth(ts, allocated, start_level, steps)
    return DeviceMemory(
        device=label,
        events=len(idx),
        has_totals=has_totals,
        peak_allocated=float(allocated[peak]) if has_totals else None,
        peak_above_start=float(allocated[peak] - start_level),
        peak_ms=(float(ts[peak]) - window_start) / 1000.0,
        peak_step=int(steps.numbers[step]) if in_step else None,
        peak_op=path[-1] if path else None,
        peak_op_path=path,
        peak_reserved=None if reserved is None else float(reserved.max()),
        reserved_at_peak=None if reserved is None else float(reserved[peak]),
        device_total=_device_total(trace, device_type, device_id),
        step_end_allocated=ends,
        growth_mb_per_step=None if slope is None else round(slope, 6),
        rising_share=rising,
        leak_suspected=leak,
        top_ops=_top_ops(trace, ranges, owner[idx], nbytes),
        curve_ms=(ts[points] - window_start) / 1000.0,
        curve_allocated=allocated[points],
        curve_reserved=None if reserved is None else reserved[points],
    )


def _device_total(trace: Trace, device_type: int, device_id: int) -> float | None:
    if device_type != 1:
        return None
    for p in trace.device_properties:
        if p.get("id") == device_id and p.get("totalGlobalMem"):
            return float(p["totalGlobalMem"])
    return None


def _top_ops(trace: Trace, ranges: HostRanges, owner: np.ndarray,
             nbytes: np.ndarray) -> list[AllocatingOp]:
    """Ops by bytes allocated inside them (allocations only; frees are not counted)."""
    alloc = nbytes > 0
    ev = trace.events
    name = np.full(len(owner), -1, dtype=np.int64)
    known = owner >= 0
    name[known] = ev.name[ranges.index[owner[known]]]
    name = name[alloc]
    sizes = nbytes[alloc]
    if not len(name):
        return []
    keys, inverse = np.unique(name, return_inverse=True)
    total = np.bincount(inverse, weights=sizes)
    count = np.bincount(inverse)
    order = np.argsort(-total, kind="stable")[:TOP_OPS]
    return [AllocatingOp(op=ev.names[keys[i]] if keys[i] >= 0 else "(no op recorded)",
                         allocations=int(count[i]), bytes=float(total[i])) for i in order]
