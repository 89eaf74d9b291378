"""Memory per device from ``[memory]`` events: curve, peak and where, growth per step, headroom.

New-format events carry the allocator's ``Total Allocated``/``Total Reserved`` after each
allocation or free; old ones (PyTorch < 1.10) only ``Bytes``. For those, allocated memory is
rebuilt as a running sum of ``Bytes``, which is exact *relative to the trace start* (what was
allocated before the profiler started is unknown), so absolute peaks, reserved memory and
headroom are reported as unknown (None) and a note says so. See docs/memory.md.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis import tabular
from trainprof.analysis.calls.nesting import HostRanges, enclosing_chain, innermost_on_any_thread
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.sections.memory_series import downsample, trend
from trainprof.analysis.streaming.parts import Carried, Part, carried, carried_over, part_of
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.lazy import LazyPattern
from trainprof.structs import Derived, Record
from trainprof.trace.model import LAUNCH_KINDS, Kind, Trace, is_allocation_op

#: Points kept of each curve for display (min and max per bucket, so peaks survive).
CURVE_POINTS = 1000
#: A peak above this share of the device's memory leaves too little headroom (plugin's rule).
HIGH_MEMORY_SHARE = 0.9
#: How many top allocating ops are listed per device.
TOP_OPS = 10
#: Host calls that ask the driver for device memory or give it back.
_ALLOCATOR_CALL = LazyPattern(
    r"^(?:cuda|hip)(?:Malloc|Free)(?:Async|Host|Managed)?$|^cuMem(?:Alloc|Free|Create|Map|Unmap"
    r"|Release)(?:_v2)?(?:Async)?$")
_NO_OP = "(no op recorded)"
_OLD_FORMAT_NOTE = (
    "{devices}: old-format memory events (no Total Allocated/Reserved): allocated memory is "
    "shown relative to the trace start; the absolute peak, reserved memory and headroom "
    "cannot be computed."
)


class AllocatingOp(Record):
    op: str
    allocations: int
    bytes: float


class StepLevel(Record):
    """Allocated memory at the end of one step."""

    step: int
    allocated: float


class MemoryCurve(Record):
    """A device's memory over time, down-sampled for display (memory_series.downsample)."""

    ms: list[float]  # from the start of the step window
    allocated: list[float]
    reserved: list[float] | None  # None: not recorded


class DeviceMemory(Record):
    """Memory figures of one device; bytes unless a name says otherwise."""

    json_derived = (Derived("reserved_to_allocated", "reserved_at_peak"),
                    Derived("headroom", "device_total"),
                    Derived("peak_pct_of_device", "headroom"),
                    Derived("near_capacity", "peak_pct_of_device"))

    device: str  # "cuda:0", "cpu"
    events: int
    has_totals: bool  # False: old format, allocated is relative to the trace start
    peak_allocated: float | None  # None in the old format
    peak_above_start: float  # peak minus what was allocated when the trace started
    peak_ms: float  # from the start of the step window
    peak_step: int | None
    peak_op: str | None
    peak_reserved: float | None
    reserved_at_peak: float | None
    device_total: float | None
    growth_mb_per_step: float | None
    rising_share: float | None
    leak_suspected: bool
    peak_op_path: list[str]
    step_end_allocated: list[StepLevel]
    top_ops: list[AllocatingOp]
    curve: MemoryCurve

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


class AllocatorCalls(Record):
    """Device allocator calls (``cudaMalloc``, ``cudaFree``...) that start inside the steps."""

    calls: int = 0
    time_us: float = 0.0
    per_step: float = 0.0
    time_pct: float | None = None  # of the step time
    names: list[str] = field(default_factory=list)


class Memory(Record):
    json_derived = (Derived("units", ""),)

    devices: list[DeviceMemory]
    allocator: AllocatorCalls = field(default_factory=AllocatorCalls, name="allocator_calls")
    notes: list[str] = field(default_factory=list)

    def device(self, name: str) -> DeviceMemory | None:
        return next((d for d in self.devices if d.device == name), None)

    @property
    def units(self) -> str:
        """The unit of every memory figure of the section."""
        return "bytes"

    def to_pandas(self) -> Any:
        """One row of scalar figures per device."""
        return data_frame([d.summary() for d in self.devices])


class _DevicePart(msgspec.Struct):
    """What one window knows of one device's memory events (those it owns)."""

    has_totals: bool  # its events carry Total Allocated (else: old format, running sums)
    events: int
    start_level: float  # new format: what was allocated before the window's first event
    delta: float  # old format: the bytes the window's events add up to
    peak: float  # the highest allocated level (old format: relative to the window's start)
    peak_ts: float
    peak_path: list[str]
    reserved_finite: bool  # every reserved figure recorded
    reserved_any: bool  # some reserved figure non-zero
    reserved_max: float
    reserved_at_peak: float
    step_levels: list[float | None]  # at each own step's end (None: no event up to there)
    last_level: float  # after the window's last event
    ops: dict[tuple[int, str], list[float]]  # (name index, name): [allocations, bytes]
    #: The curve's samples (time, allocated, reserved): down-sampled over the whole trace.
    ts: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray


class _Part(msgspec.Struct):
    devices: dict[tuple[int, int], _DevicePart]
    totals: dict[tuple[int, int], float | None]  # device memory from the trace's properties
    allocator: AllocatorCalls
    allocator_running: Carried  # calls still running at the part's end
    own_steps: int


def _partial(window: Window) -> _Part:
    trace, steps, part = window.trace, window.steps, part_of(window)
    mem = trace.memory
    allocator, running = _allocator_part(trace, steps, part)
    devices: dict[tuple[int, int], _DevicePart] = {}
    totals: dict[tuple[int, int], float | None] = {}
    mine = part.owns_instants(mem.ts)
    # Events of the next window up to the last own step's end (steps may touch, or overlap by
    # a rounding error): they set the level at that end.
    after = ~mine & (mem.ts >= part.end)
    after &= mem.ts <= steps.ends[-1] if len(steps) and not part.last else False
    seen = np.flatnonzero(mine | after)
    if len(seen):
        ranges = _host_ranges(trace)
        owner = np.full(len(mem), -1, dtype=np.int64)
        owner[seen] = _allocating_op(trace, ranges)[seen]
        first, group = tabular.group_ids(mem.device_type[seen], mem.device_id[seen])
        for g in range(len(first)):
            dt, di = int(mem.device_type[seen[first[g]]]), int(mem.device_id[seen[first[g]]])
            idx = seen[group == g]
            devices[(dt, di)] = _device_part(trace, steps, ranges, owner, idx[mine[idx]],
                                             idx[after[idx]])
            totals[(dt, di)] = _device_total(trace, dt, di)
    return _Part(devices, totals, allocator, running, len(steps))


def _device_part(trace: Trace, steps: StepWindows, ranges: HostRanges, owner: np.ndarray,
                 idx: np.ndarray, after: np.ndarray) -> _DevicePart:
    """One device's owned events ``idx`` (and ``after``: the next window's, up to the last own
    step's end)."""
    mem = trace.memory
    has_totals = bool(np.isfinite(mem.total_allocated[np.concatenate([idx, after])]).any())
    if has_totals:
        idx = idx[np.isfinite(mem.total_allocated[idx])]
        after = after[np.isfinite(mem.total_allocated[after])]
    ts, nbytes = mem.ts[idx], np.nan_to_num(mem.nbytes[idx])
    if has_totals:
        allocated = mem.total_allocated[idx]
        start_level = float(allocated[0] - nbytes[0]) if len(idx) else 0.0
        reserved = mem.total_reserved[idx]
        later = mem.total_allocated[after]
    else:
        allocated = np.cumsum(nbytes)
        start_level = 0.0
        reserved = np.full(len(idx), np.nan)
        later = (allocated[-1] if len(idx) else 0.0) + np.cumsum(np.nan_to_num(mem.nbytes[after]))
    levels = np.concatenate([allocated, later])
    last = np.searchsorted(np.concatenate([ts, mem.ts[after]]), steps.ends, side="right") - 1
    step_levels = [float(levels[i]) if i >= 0 else None for i in last.tolist()]
    if not len(idx):  # only the next window's events: they set the last step's level
        return _DevicePart(has_totals, 0, 0.0, 0.0, -np.inf, 0.0, [], True, False, np.nan,
                           np.nan, step_levels, 0.0, {}, ts, allocated, reserved)
    peak = int(np.argmax(allocated))
    pos = owner[idx[peak]]
    path = []
    if pos >= 0:
        chain = enclosing_chain(ranges, float(ts[peak]), int(ranges.thread[pos]))
        path = [trace.events.names[trace.events.name[ranges.index[c]]] for c in chain]
    ev = trace.events
    alloc = nbytes > 0
    who = owner[idx][alloc]
    name = np.full(len(who), -1, dtype=np.int64)
    name[who >= 0] = ev.name[ranges.index[who[who >= 0]]]
    # Calls and bytes per op name, in order of first allocation (bincount adds each name's
    # sizes in event order, as a running sum would).
    ops: dict[tuple[int, str], list[float]] = {}
    names, first, which = np.unique(name, return_index=True, return_inverse=True)
    calls = np.bincount(which, minlength=len(names))
    sizes = np.bincount(which, weights=nbytes[alloc], minlength=len(names))
    for g in np.argsort(first, kind="stable").tolist():
        n = int(names[g])
        ops[(n, ev.names[n] if n >= 0 else _NO_OP)] = [int(calls[g]), float(sizes[g])]
    finite = bool(np.isfinite(reserved).all())
    return _DevicePart(
        has_totals=has_totals, events=len(idx), start_level=start_level,
        delta=float(nbytes.sum()) if not has_totals else 0.0,
        peak=float(allocated[peak]), peak_ts=float(ts[peak]), peak_path=path,
        reserved_finite=finite, reserved_any=bool(np.nan_to_num(reserved).any()),
        reserved_max=float(reserved.max()) if finite else np.nan,
        reserved_at_peak=float(reserved[peak]),
        step_levels=step_levels,
        last_level=float(allocated[-1]), ops=ops,
        ts=ts.copy(), allocated=np.asarray(allocated, dtype=np.float64).copy(),
        reserved=reserved.copy(),
    )


def _combine(parts: list[_Part], steps: StepWindows) -> Memory:
    allocator = _allocator_joined([(p.allocator, p.allocator_running) for p in parts], steps)
    keys = sorted({k for p in parts for k in p.devices})
    if not keys:
        return Memory(devices=[], notes=["No [memory] events: record with profile_memory=True."],
                      allocator=allocator)
    out = Memory(devices=[], allocator=allocator)
    for key in keys:
        mine = [p.devices.get(key) for p in parts]
        total = next(p.totals[key] for p in parts if key in p.devices)
        out.devices.append(_device_joined(key, mine, [p.own_steps for p in parts], total,
                                          steps))
    old = [d.device for d in out.devices if not d.has_totals]
    if old:
        out.notes.append(_OLD_FORMAT_NOTE.format(devices=", ".join(old)))
    return out


def _device_joined(key: tuple[int, int], mine: list[_DevicePart | None], own_steps: list[int],
                   device_total: float | None, steps: StepWindows) -> DeviceMemory:
    """One device's figures from every window's part (None: the window has no event of it)."""
    has_totals = any(d is not None and d.has_totals for d in mine)
    # In the new format only events with totals count; in the old one levels are running
    # sums, each window's shifted by the bytes of the windows before it.
    kept = [d if d is not None and d.has_totals == has_totals else None for d in mine]
    present = [d for d in kept if d is not None and d.events]
    offsets, shift = [], 0.0
    for d in kept:
        offsets.append(shift)
        shift += d.delta if d is not None else 0.0
    start_level = present[0].start_level
    peak_part, peak_level = None, -np.inf
    for d, off in zip(kept, offsets, strict=True):
        if d is not None and d.peak + off > peak_level:
            peak_part, peak_level = d, d.peak + off
    assert peak_part is not None
    at_end, level = [], start_level
    for count, d, off in zip(own_steps, kept, offsets, strict=True):
        for i in range(count):  # a step without an event of its own keeps the level before it
            own = d.step_levels[i] if d is not None else None
            at_end.append(level if own is None else own + off)
        if d is not None and d.events:
            level = d.last_level + off
    recorded = all(d.reserved_finite for d in present) and any(d.reserved_any for d in present)
    ts = np.concatenate([d.ts for d in present])
    allocated = np.concatenate([d.allocated + off for d, off in zip(kept, offsets, strict=True)
                                if d is not None and d.events])
    reserved = np.concatenate([d.reserved for d in present]) if recorded else None
    window_start = steps.span[0]
    step = np.searchsorted(steps.starts, peak_part.peak_ts, side="right") - 1
    in_step = step >= 0 and peak_part.peak_ts < steps.ends[step]
    points = downsample(allocated, reserved, CURVE_POINTS)
    ends, slope, rising, leak = trend(steps.numbers, np.array(at_end, dtype=np.float64))
    return DeviceMemory(
        device=_label(*key),
        events=sum(d.events for d in present),
        has_totals=has_totals,
        peak_allocated=peak_level if has_totals else None,
        peak_above_start=peak_level - start_level,
        peak_ms=(peak_part.peak_ts - window_start) / 1000.0,
        peak_step=int(steps.numbers[step]) if in_step else None,
        peak_op=peak_part.peak_path[-1] if peak_part.peak_path else None,
        peak_op_path=peak_part.peak_path,
        peak_reserved=max(d.reserved_max for d in present) if recorded else None,
        reserved_at_peak=peak_part.reserved_at_peak if recorded else None,
        device_total=device_total,
        step_end_allocated=[StepLevel(step, level) for step, level in ends],
        growth_mb_per_step=None if slope is None else round(slope, 6),
        rising_share=rising,
        leak_suspected=leak,
        top_ops=_top_ops_joined(present),
        curve=MemoryCurve(ms=((ts[points] - window_start) / 1000.0).tolist(),
                          allocated=allocated[points].tolist(),
                          reserved=None if reserved is None else reserved[points].tolist()),
    )


def _top_ops_joined(parts: list[_DevicePart]) -> list[AllocatingOp]:
    """Ops by bytes allocated inside them over every window (ties: the name table's order)."""
    total: dict[tuple[int, str], list[float]] = {}
    for d in parts:
        for key, (count, size) in d.ops.items():
            entry = total.setdefault(key, [0, 0.0])
            entry[0] += count
            entry[1] += size
    ranked = sorted(sorted(total.items()), key=lambda kv: -kv[1][1])[:TOP_OPS]
    return [AllocatingOp(op=name, allocations=int(count), bytes=float(size))
            for (_, name), (count, size) in ranked]


#: Memory figures per device (none when the trace has no ``[memory]`` events), computed
#: window by window (analysis/streaming/windows.py): ``memory(trace, steps)`` for a whole trace.
memory: WindowedSection[_Part, Memory] = WindowedSection(_partial, _combine, cost=0.47)


def allocator_calls(trace: Trace, steps: StepWindows) -> AllocatorCalls:
    """Device allocator calls inside the steps: the caching allocator asking the driver."""
    found, over = _allocator_part(trace, steps, Part(*steps.span, first=True, last=True))
    return _allocator_joined([(found, over)], steps)


def _allocator_part(trace: Trace, steps: StepWindows, part: Part
                    ) -> tuple[AllocatorCalls, Carried]:
    """The allocator calls starting in the window's own steps (time inside them), and those
    still running at the part's end (their time in later steps is added once all are known)."""
    ev = trace.events
    launch = ev.of_kind(*LAUNCH_KINDS)
    names = np.unique(ev.name[launch])
    is_alloc = np.zeros(len(ev.names), dtype=bool)
    is_alloc[names] = [bool(_ALLOCATOR_CALL.match(ev.names[n])) for n in names]
    calls = launch & is_alloc[ev.name]
    idx = np.flatnonzero(calls & part.owns_instants(ev.ts))
    which = np.searchsorted(steps.starts, ev.ts[idx], side="right") - 1
    ok = which >= 0
    ok[ok] &= ev.ts[idx[ok]] < steps.ends[which[ok]]
    idx = idx[ok]
    margin = np.flatnonzero(calls & (ev.ts < part.start))
    over = carried(part, ev.ts[idx], event_ends(ev)[idx], ev.ts[margin], event_ends(ev)[margin])
    if not len(idx):
        return AllocatorCalls(), over
    time = iv.intersect(iv.union(ev.ts[idx], event_ends(ev)[idx]),
                        iv.union(steps.starts, steps.ends)).total()
    return (AllocatorCalls(calls=len(idx), time_us=time,
                           names=sorted({ev.names[n] for n in ev.name[idx]})), over)


def _allocator_joined(parts: list[tuple[AllocatorCalls, Carried]],
                      steps: StepWindows) -> AllocatorCalls:
    """Every window's allocator calls: (calls, those running past the window's part)."""
    calls = sum(found.calls for found, _ in parts)
    if not calls:
        return AllocatorCalls()
    time = sum(found.time_us for found, _ in parts)
    later = carried_over([over for _, over in parts])
    time += iv.intersect(later, iv.union(steps.starts, steps.ends)).total()
    step_time = float(steps.durations.sum())
    return AllocatorCalls(
        calls=calls, time_us=time, per_step=calls / max(len(steps), 1),
        time_pct=time / step_time * 100.0 if step_time > 0 else None,
        names=sorted({n for found, _ in parts for n in found.names}),
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
    return HostRanges.of(ev.ts[idx], event_ends(ev)[idx], ev.tid[idx], idx)


def _allocating_op(trace: Trace, ranges: HostRanges) -> np.ndarray:
    """Per memory event, the position in ``ranges`` of the op it happened in, or -1."""
    mem = trace.memory
    thread = getattr(mem, "tid", None)  # not every loader version records the thread
    if thread is not None:
        return ranges.innermost(mem.ts, thread)
    return innermost_on_any_thread(ranges, mem.ts)


def _device_total(trace: Trace, device_type: int, device_id: int) -> float | None:
    if device_type != 1:
        return None
    for p in trace.device_properties:
        if p.get("id") == device_id and p.get("totalGlobalMem"):
            return float(p["totalGlobalMem"])
    return None
