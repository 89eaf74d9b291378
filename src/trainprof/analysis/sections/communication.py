"""Collective communication of one rank: by type, count, bytes, time, exposed and overlapped.

On a GPU rank the collectives are the NCCL/RCCL kernels; each kernel's type and size come from
its own args when Kineto recorded them, else from the host op that launched it (``nccl:*``,
``c10d::*``, ``record_param_comms``), else from the kernel's name. Without communication kernels
(Gloo on CPU, or a single-rank NCCL job that launches none) the collectives are the host ranges
of the backend (``gloo:all_reduce``, ``nccl:all_reduce``) and their host time; overlap is then
measured against host ops. See docs/communication.md.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis import tabular
from trainprof.analysis.calls.nesting import HostRanges
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.exposure import exposed, span_sets
from trainprof.analysis.overview.steps import StepWindows, launch_links
from trainprof.analysis.streaming.parts import Part, part_of
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.structs import Derived, Record
from trainprof.trace.model import (
    COLLECTIVE_TYPES,
    FLAG_COMM,
    Kind,
    Trace,
    collective_type,
    dtype_bytes,
    is_backend_collective,
)

_HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)


class CollectiveType(Record):
    """All collectives of one type inside the step window; times in µs. ``steps``: the steps of
    its section (``Communication`` sets it), for the figures per step its JSON writes."""

    json_derived = (Derived("count_per_step", "count"), Derived("bytes_per_step", "bytes"),
                    Derived("time_ms_per_step", "time_us"),
                    Derived("busy_ms_per_step", "busy_us"), Derived("overlap_pct", "exposed_us"))
    json_internal = frozenset({"steps"})

    type: str
    count: int
    sized: int  # how many had a known size
    bytes: float | None  # of the sized ones (None: none was)
    time_us: float  # sum of durations
    busy_us: float  # union
    exposed_us: float  # busy time with no compute running
    steps: int = 0

    @property
    def overlap_pct(self) -> float | None:
        return (self.busy_us - self.exposed_us) / self.busy_us * 100.0 if self.busy_us else None

    @property
    def count_per_step(self) -> float:
        """Calls per step."""
        return self.count / max(self.steps, 1)

    @property
    def bytes_per_step(self) -> float | None:
        return None if self.bytes is None else self.bytes / max(self.steps, 1)

    @property
    def time_ms_per_step(self) -> float:
        return self.time_us / max(self.steps, 1) / 1000.0

    @property
    def busy_ms_per_step(self) -> float:
        """Busy time (union) per step, in ms."""
        return self.busy_us / max(self.steps, 1) / 1000.0


class Instances(msgspec.Struct):
    """Each collective once, for matching across ranks (not part of the JSON)."""

    type: np.ndarray  # index into COLLECTIVE_TYPES
    step: np.ndarray  # step number, -1 outside every step
    start_us: np.ndarray  # absolute: the trace's t0 plus the start
    dur_us: np.ndarray
    #: absolute end of each instance's step (inf outside every step, or when unknown: a rank
    #: read from a cluster summary); a wait in it is counted up to there.
    step_end_us: np.ndarray | None = None

    def step_ends(self) -> np.ndarray:
        ends = self.step_end_us
        return ends if ends is not None and len(ends) == len(self.dur_us) else \
            np.full(len(self.dur_us), np.inf)

    @staticmethod
    def empty() -> Instances:
        return Instances(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0))

    def __len__(self) -> int:
        return len(self.dur_us)


class Totals(msgspec.Struct):
    """The µs totals behind a ``Communication``'s figures."""

    window_us: float  # the step window
    busy_us: float  # the collectives' union
    exposed_us: float  # of it, with no compute running


class Communication(Record):
    """A rank's collectives, with the figures its JSON writes (``of`` works them out)."""

    json_derived = (Derived("count", "steps"),
                    Derived("types", "per_step_ms", attr="reported_types"))
    json_internal = frozenset({"types", "exact", "instances"})

    source: str  # "kernels", "host ops", or "none"
    backend: str | None
    steps: int
    time_pct: float  # busy time's share of the step window
    exposed_pct: float
    ms_per_step: float  # busy time (union) per step
    exposed_ms_per_step: float
    overlap_pct: float | None  # busy time's share hidden by compute (None: none busy)
    per_step_ms: list[float]  # communication time (union) in each step
    types: list[CollectiveType]
    notes: list[str] = field(default_factory=list)
    #: Not part of the JSON: the exact totals (cluster summaries keep them), None when read
    #: from a saved result; each collective once, for matching across ranks.
    exact: Totals | None = None
    instances: Instances = field(default_factory=Instances.empty)

    def __post_init__(self) -> None:
        for t in self.types:  # their figures per step are over this section's steps
            t.steps = self.steps

    @staticmethod
    def of(source: str, backend: str | None, steps: int, totals: Totals, per_step_ms: list[float],
           types: list[CollectiveType], notes: list[str], instances: Instances) -> Communication:
        """The figures of ``totals`` over ``steps`` steps."""
        w, n = totals.window_us, max(steps, 1)
        busy, exposed_us = totals.busy_us, totals.exposed_us
        return Communication(
            source=source, backend=backend, steps=steps,
            time_pct=busy / w * 100.0 if w > 0 else 0.0,
            exposed_pct=exposed_us / w * 100.0 if w > 0 else 0.0,
            ms_per_step=busy / n / 1000.0, exposed_ms_per_step=exposed_us / n / 1000.0,
            overlap_pct=(busy - exposed_us) / busy * 100.0 if busy else None,
            per_step_ms=per_step_ms, types=types, notes=notes, exact=totals, instances=instances)

    @property
    def totals(self) -> Totals:
        """The exact totals, or for a record read from a saved result the ones its figures give
        (to their 12 significant digits; the window 0 when nothing was busy)."""
        if self.exact is not None:
            return self.exact
        n = max(self.steps, 1)
        busy = self.ms_per_step * n * 1000.0
        return Totals(window_us=busy / self.time_pct * 100.0 if self.time_pct else 0.0,
                      busy_us=busy, exposed_us=self.exposed_ms_per_step * n * 1000.0)

    @property
    def count(self) -> int:
        """Collectives of every type in the step window."""
        return int(sum(t.count for t in self.types))

    @property
    def busy_us(self) -> float:
        return self.totals.busy_us

    @property
    def exposed_us(self) -> float:
        return self.totals.exposed_us

    @property
    def reported_types(self) -> list[dict[str, Any]]:
        """The types as the JSON writes them: with their figures per step."""
        return [t.to_dict() for t in self.types]

    def to_pandas(self) -> Any:
        return data_frame(self.reported_types)


class _Found(msgspec.Struct):
    """The collectives one way of finding them sees in a window's part (see ``_partial``)."""

    rows: dict[int, CollectiveType]  # by type code: owned counts and times, busy over the part
    busy_us: float
    exposed_us: float
    per_step_ms: list[float]  # the window's own steps
    running: list[tuple[int, float]]  # (type, end) of owned collectives past the part's end
    instances: Instances
    #: Kernels only: per owned kernel that took its host op's size, (host op, type, bytes),
    #: so that an op whose first kernel ran in an earlier window is counted once.
    sized_by_host: list[tuple[tuple[float, float, int], int, float]] = field(default_factory=list)
    threads: frozenset[int] = frozenset()  # host only: the threads running the collectives
    thread_of: np.ndarray | None = None  # per instance, its thread (host ranges' order)
    #: Host only: per type code (None: all), busy time by the set of threads whose CPU ops
    #: run beside it, so that its exposed part can follow every window's collective threads.
    by_threads: dict[int | None, dict[frozenset[int], float]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(r.count for r in self.rows.values())


class _Part(msgspec.Struct):
    backend: str | None
    kernels: _Found | None  # None: no communication kernel overlaps the part
    host: _Found | None  # None: the window owns communication kernels
    backend_ops: bool  # the window holds backend collective ranges (gloo:*, nccl:*)
    own_steps: int


def _partial(window: Window) -> _Part:
    trace, part = window.trace, part_of(window)
    ev = trace.events
    info = trace.metadata.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    covering = part.covering(ev.ts, event_ends(ev))
    owned = part.owns(ev.ts, event_ends(ev))
    comm_kernels = (ev.kind == Kind.KERNEL) & ev.flagged(FLAG_COMM)
    host = _HostComm.of(trace)
    kernels = host_found = None
    seen = np.flatnonzero(comm_kernels & covering)
    if len(seen):
        types, nbytes, first_of, from_host = _kernel_sizes(trace, seen, host)
        compute = span_sets(trace, part.start, part.end).compute
        kernels = _found(window, part, seen, owned[seen], types, nbytes, compute)
        mine = owned[seen] & (first_of >= 0)
        r = host.ranges
        kernels.sized_by_host = [
            ((float(r.ts[f]), float(r.end[f]), int(r.thread[f])), int(t),
             float(n) if h else np.nan)
            for f, t, n, h in zip(first_of[mine], types[mine], nbytes[mine], from_host[mine],
                                  strict=True)]
    index = host.ranges.index
    backend_ops = np.zeros(len(index), dtype=bool)
    if not (comm_kernels & owned).any():  # (else the kernels are the collectives)
        backend_ops[:] = [is_backend_collective(Kind(k), ev.names[n]) for k, n in
                          zip(ev.kind[index], ev.name[index], strict=True)]
        pick = backend_ops if backend_ops.any() else host.ranges.top_level()
        idx = index[pick]
        idx = idx[covering[idx]]
        types, nbytes = _host_types(trace, idx, host)
        threads = np.unique(ev.tid[idx])
        compute = _host_compute(trace, threads, part.start, part.end)
        host_found = _found(window, part, idx, owned[idx], types, nbytes, compute,
                            _ops_by_thread(trace, part.start, part.end))
        host_found.threads = frozenset(threads.tolist())
        host_found.thread_of = ev.tid[idx[owned[idx]]]
    return _Part(backend, kernels, host_found, bool(backend_ops.any()), len(window.steps))


def _found(window: Window, part: Part, idx: np.ndarray, own: np.ndarray, types: np.ndarray,
           nbytes: np.ndarray, compute: iv.Intervals,
           ops: dict[int, iv.Intervals] | None = None) -> _Found:
    """Rows, busy and exposed time over the part of the collectives ``idx`` that overlap it
    (``own``: the ones the window owns, counted). With ``ops`` (host collectives: each
    thread's CPU ops), the busy time is also split by the threads running ops beside it."""
    trace, steps = window.trace, window.steps
    ev = trace.events
    start, end = part.start, part.end
    ts = np.maximum(ev.ts[idx], start)
    te = np.minimum(event_ends(ev)[idx], end) if part.last else event_ends(ev)[idx]
    rows = {}
    by_threads: dict[int | None, dict[frozenset[int], float]] = {}
    for code in np.unique(types).tolist():
        m = types == code
        busy = iv.clip(iv.union(ts[m], te[m]), start, end)
        m &= own
        sized = m & np.isfinite(nbytes)
        rows[code] = CollectiveType(
            type=COLLECTIVE_TYPES[code], count=int(m.sum()), sized=int(sized.sum()),
            bytes=float(nbytes[sized].sum()), time_us=float((te - ts)[m].sum()),
            busy_us=busy.total(), exposed_us=exposed(busy, compute),
        )
        if ops is not None:
            by_threads[code] = _beside(busy, ops)
    busy = iv.clip(iv.union(ts, te), start, end)
    if ops is not None:
        by_threads[None] = _beside(busy, ops)
    late = np.flatnonzero(own & (te > end))
    mine = idx[own]
    step_of = np.searchsorted(steps.starts, ev.ts[mine], side="right") - 1
    inside = (step_of >= 0) & (ev.ts[mine] < steps.ends[np.maximum(step_of, 0)])
    return _Found(
        rows=rows,
        busy_us=busy.total(),
        exposed_us=exposed(busy, compute),
        per_step_ms=(iv.covered_in_windows(busy, steps.starts, steps.ends) / 1000.0).tolist(),
        running=[(int(types[i]), float(te[i])) for i in late],
        by_threads=by_threads,
        instances=Instances(
            type=types[own].astype(np.int64),
            step=np.where(inside, steps.numbers[np.maximum(step_of, 0)], -1),
            start_us=trace.t0_us + ev.ts[mine],
            dur_us=ev.dur[mine].copy(),
            step_end_us=np.where(inside, trace.t0_us + steps.ends[np.maximum(step_of, 0)],
                                 np.inf) if len(steps) else np.full(len(mine), np.inf),
        ),
    )


def _combine(parts: list[_Part], steps: StepWindows) -> Communication:
    start, end = steps.span
    backend = parts[0].backend if parts else None
    by_kernels = any(p.kernels is not None and p.kernels.count for p in parts)
    if by_kernels:
        source = "kernels"
        found = [p.kernels for p in parts]
    else:
        backend_ops = any(p.backend_ops for p in parts)
        found = [p.host if p.backend_ops or not backend_ops else None for p in parts]
        source = "host ops" if any(f is not None and f.count for f in found) else "none"
    found_in = [f for f in found if f is not None]
    rows: dict[int, CollectiveType] = {}
    for f in found_in:
        for code, r in f.rows.items():
            row = rows.setdefault(code, CollectiveType(COLLECTIVE_TYPES[code], 0, 0, 0.0, 0.0,
                                                       0.0, 0.0))
            row.count += r.count
            row.sized += r.sized
            row.bytes = (row.bytes or 0.0) + (r.bytes or 0.0)
            row.time_us += r.time_us
            row.busy_us += r.busy_us
            row.exposed_us += r.exposed_us
        for code, te in f.running:  # still running at the span's end: counted up to there
            rows[code].time_us -= max(te - end, 0.0)
    if not by_kernels:
        _expose_beside_threads(rows, found_in)
    counted: set[tuple[float, float, int]] = set()
    for f in found_in:  # a host op's size counts for its first kernel only, in any window
        for key, code, nbytes in f.sized_by_host:
            if key in counted and np.isfinite(nbytes):
                rows[code].sized -= 1
                rows[code].bytes = (rows[code].bytes or 0.0) - nbytes
            counted.add(key)
    for row in rows.values():
        row.bytes = row.bytes if row.sized else None
    types = sorted((rows[c] for c in sorted(rows) if rows[c].count), key=lambda r: -r.time_us)
    per_step: list[float] = []
    for p, maybe in zip(parts, found, strict=True):
        per_step += maybe.per_step_ms if maybe is not None else [0.0] * p.own_steps
    notes = []
    if source == "none" and backend:
        notes.append(f"distributedInfo names backend {backend!r}, but the window holds no "
                     "communication.")
    return Communication.of(
        source=source,
        backend=backend,
        steps=len(steps),
        # (host: exposed as _expose_beside_threads measured it)
        totals=Totals(window_us=end - start, busy_us=sum(f.busy_us for f in found_in),
                      exposed_us=sum(f.exposed_us for f in found_in)),
        per_step_ms=per_step,
        types=types,
        notes=notes,
        instances=_joined(found_in, by_thread=not by_kernels),
    )


def _ops_by_thread(trace: Trace, start: float, end: float) -> dict[int, iv.Intervals]:
    """Per thread, its CPU ops (not communication) inside ``[start, end)``."""
    ev = trace.events
    busy = np.flatnonzero(ev.of_kind(Kind.CPU_OP) & ~ev.flagged(FLAG_COMM) & (ev.ts < end)
                          & (event_ends(ev) > start))
    return {int(t): iv.clip(iv.union(ev.ts[busy[ev.tid[busy] == t]],
                                     event_ends(ev)[busy[ev.tid[busy] == t]]), start, end)
            for t in np.unique(ev.tid[busy]).tolist()}


def _beside(busy: iv.Intervals, ops: dict[int, iv.Intervals]) -> dict[frozenset[int], float]:
    """``busy`` time split by the set of threads whose ops run at the same time."""
    if not len(busy):
        return {}
    threads = [t for t, o in ops.items() if len(o)]
    if not threads:
        return {frozenset(): busy.total()}
    points = np.unique(np.concatenate([busy.starts, busy.ends]
                                      + [np.concatenate([ops[t].starts, ops[t].ends])
                                         for t in threads]))
    left, length = points[:-1], np.diff(points)
    inside = _covers(busy, left)
    left, length = left[inside], length[inside]
    beside = np.stack([_covers(ops[t], left) for t in threads]) if threads else \
        np.zeros((0, len(left)), dtype=bool)
    sets, which = np.unique(beside.T, axis=0, return_inverse=True)
    total = np.bincount(which.reshape(-1), weights=length, minlength=len(sets))
    return {frozenset(t for t, on in zip(threads, row, strict=True) if on): float(x)
            for row, x in zip(sets.tolist(), total.tolist(), strict=True)}


def _covers(s: iv.Intervals, t: np.ndarray) -> np.ndarray:
    """Whether each time lies inside the set ``s``."""
    i = np.searchsorted(s.starts, t, side="right") - 1
    ok = i >= 0
    ok[ok] &= t[ok] < s.ends[i[ok]]
    return ok


def _expose_beside_threads(rows: dict[int, CollectiveType], found: list[_Found]) -> None:
    """Host collectives overlap the ops of threads that run no collective in the whole trace:
    where a window's own collective threads were fewer, its exposed time is measured again
    from the busy time it split by the threads beside it."""
    threads = frozenset().union(*(f.threads for f in found))
    if all(f.threads == threads for f in found):
        return
    for code, row in rows.items():
        row.exposed_us = _exposed_beside([f.by_threads.get(code, {}) for f in found], threads)
    for f in found:
        f.exposed_us = _exposed_beside([f.by_threads.get(None, {})], threads)


def _exposed_beside(parts: list[dict[frozenset[int], float]], threads: frozenset[int]) -> float:
    """Busy time with no op running beside it on a thread outside ``threads``."""
    return sum(x for part in parts for beside, x in part.items() if beside <= threads)


def _host_compute(trace: Trace, threads: np.ndarray, start: float, end: float) -> iv.Intervals:
    """CPU ops (not communication) on threads that run no collective (``threads``): what host
    collectives can overlap with."""
    ev = trace.events
    busy = ev.of_kind(Kind.CPU_OP) & ~ev.flagged(FLAG_COMM)
    busy &= ~np.isin(ev.tid, threads)
    return iv.clip(iv.union(ev.ts[busy], event_ends(ev)[busy]), start, end)


class _HostComm(msgspec.Struct):
    """Host communication ranges, with what each says about type and size."""

    ranges: HostRanges
    type: np.ndarray  # per range: index into COLLECTIVE_TYPES
    nbytes: np.ndarray  # per range: message bytes, nan when unknown

    @staticmethod
    def of(trace: Trace) -> _HostComm:
        ev = trace.events
        idx = np.flatnonzero(ev.of_kind(*_HOST_KINDS) & ev.flagged(FLAG_COMM))
        ranges = HostRanges.of(ev.ts[idx], event_ends(ev)[idx], ev.tid[idx], idx)
        # Type and size depend only on the (name, args) pair: work them out once per pair.
        e = ranges.index
        first, which = tabular.group_ids(ev.name[e], ev.detail[e])
        types = np.empty(len(first), dtype=np.int64)
        nbytes = np.full(len(first), np.nan)
        for i, f in enumerate(e[first]):
            detail = ev.details[ev.detail[f]] if ev.detail[f] >= 0 else {}
            types[i] = _type_code(detail.get("collective") or ev.names[ev.name[f]])
            nbytes[i] = _message_bytes(detail)
        types, nbytes = types[which], nbytes[which]
        return _HostComm(ranges, types, nbytes)

    def enclosing(self, t: np.ndarray, thread: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """Per query, the innermost enclosing range among ``wanted`` ones (position), or -1."""
        sub = np.flatnonzero(wanted)
        if not len(sub):
            return np.full(len(t), -1, dtype=np.int64)
        r = self.ranges
        part = HostRanges(sub, r.ts[sub], r.end[sub], r.thread[sub])
        pos = part.innermost(t, thread)
        return np.where(pos >= 0, sub[np.maximum(pos, 0)], -1)


def _type_code(name: str) -> int:
    return COLLECTIVE_TYPES.index(collective_type(str(name)))


_OTHER = COLLECTIVE_TYPES.index("other")


def _message_bytes(detail: dict[str, Any]) -> float:
    """max(in, out) elements times the element size (see docs/communication.md)."""
    size = dtype_bytes(detail.get("dtype"))
    counts = [c for c in (detail.get("in_nelems"), detail.get("out_nelems"))
              if isinstance(c, int | float)]
    if size is None or not counts:
        return np.nan
    return float(max(counts)) * size


def _kernel_types(trace: Trace, kernels: np.ndarray, host: _HostComm
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Type code and bytes per communication kernel (the SQL tables read them too)."""
    types, nbytes, _, _ = _kernel_sizes(trace, kernels, host)
    return types, nbytes


def _kernel_sizes(trace: Trace, kernels: np.ndarray, host: _HostComm
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Type code and bytes per communication kernel; per kernel, the host op (position) whose
    size it took as that op's first kernel (-1: none), and whether that size stood (its own
    args did not replace it)."""
    ev = trace.events
    names, which = np.unique(ev.name[kernels], return_inverse=True)
    types = np.array([_type_code(ev.names[n]) for n in names], dtype=np.int64)[which]
    nbytes = np.full(len(kernels), np.nan)
    first_of = np.full(len(kernels), -1, dtype=np.int64)
    # The host op around each kernel's launch call.
    dev, launch = launch_links(trace)
    launch_of = np.full(len(ev), -1, dtype=np.int64)
    launch_of[dev] = launch
    lk = launch_of[kernels]
    has = lk >= 0
    if has.any() and len(host.ranges):
        t, th = ev.ts[lk[has]], ev.tid[lk[has]]
        typed = host.enclosing(t, th, host.type != _OTHER)
        host_type = np.where(typed >= 0, host.type[np.maximum(typed, 0)], _OTHER)
        types[has] = np.where(host_type != _OTHER, host_type, types[has])
        sized = host.enclosing(t, th, np.isfinite(host.nbytes))
        # A host op's size counts once, for the first kernel it launched.
        first = np.zeros(len(sized), dtype=bool)
        ok = np.flatnonzero(sized >= 0)
        first[ok[np.unique(sized[ok], return_index=True)[1]]] = True
        nbytes[has] = np.where(first, host.nbytes[np.maximum(sized, 0)], np.nan)
        first_of[has] = np.where(first, sized, -1)
    from_host = first_of >= 0
    for i, e in enumerate(kernels):  # the kernel's own args win (few kernels carry them)
        if ev.detail[e] >= 0:
            detail = ev.details[ev.detail[e]]
            if detail.get("collective"):
                types[i] = _type_code(detail["collective"])
                nbytes[i] = _message_bytes(detail)
                from_host[i] = False
    return types, nbytes, first_of, from_host


def _host_types(trace: Trace, idx: np.ndarray, host: _HostComm
                ) -> tuple[np.ndarray, np.ndarray]:
    """Type code and bytes per host collective range."""
    ev = trace.events
    pos = np.searchsorted(np.sort(host.ranges.index), idx)
    order = np.argsort(host.ranges.index)
    own = order[pos] if len(idx) else np.zeros(0, dtype=np.int64)
    types = host.type[own]
    nbytes = host.nbytes[own].copy()
    unknown = ~np.isfinite(nbytes)
    if unknown.any():
        sized = host.enclosing(ev.ts[idx[unknown]], ev.tid[idx[unknown]],
                               np.isfinite(host.nbytes))
        nbytes[unknown] = np.where(sized >= 0, host.nbytes[np.maximum(sized, 0)], np.nan)
    return types, nbytes


def _joined(found: list[_Found], by_thread: bool) -> Instances:
    """The instances of every window, in order: by start, or for host ranges by (thread,
    start, longest first) as ``HostRanges`` sorts them."""
    parts = [f.instances for f in found]
    if not parts:
        return Instances.empty()
    joined = Instances(
        type=np.concatenate([p.type for p in parts]),
        step=np.concatenate([p.step for p in parts]),
        start_us=np.concatenate([p.start_us for p in parts]),
        dur_us=np.concatenate([p.dur_us for p in parts]),
        step_end_us=np.concatenate([p.step_ends() for p in parts]),
    )
    if by_thread and len(parts) > 1:
        thread = np.concatenate([f.thread_of for f in found])
        order = np.lexsort((-joined.dur_us, joined.start_us, thread))
        joined = Instances(joined.type[order], joined.step[order], joined.start_us[order],
                           joined.dur_us[order], joined.step_ends()[order])
    return joined


#: The communication figures of one rank over its step window, computed window by window
#: (analysis/streaming/windows.py): ``communication(trace, steps)`` for a whole trace.
communication: WindowedSection[_Part, Communication] = WindowedSection(_partial, _combine, cost=0.16)
