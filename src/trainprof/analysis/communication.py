"""Collective communication of one rank: by type, count, bytes, time, exposed and overlapped.

On a GPU rank the collectives are the NCCL/RCCL kernels; each kernel's type and size come from
its own args when Kineto recorded them, else from the host op that launched it (``nccl:*``,
``c10d::*``, ``record_param_comms``), else from the kernel's name. Without communication kernels
(Gloo on CPU, or a single-rank NCCL job that launches none) the collectives are the host ranges
of the backend (``gloo:all_reduce``, ``nccl:all_reduce``) and their host time; overlap is then
measured against host ops. See docs/communication.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis import tabular
from trainprof.analysis.exposure import exposed, window_sets
from trainprof.analysis.frames import data_frame
from trainprof.analysis.nesting import HostRanges
from trainprof.analysis.steps import StepWindows, launch_links
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


@dataclass
class CollectiveType:
    """All collectives of one type inside the step window; times in µs."""

    type: str
    count: int
    sized: int  # how many had a known size
    bytes: float  # of the sized ones
    time_us: float  # sum of durations
    busy_us: float  # union
    exposed_us: float  # busy time with no compute running

    @property
    def overlap_pct(self) -> float | None:
        return (self.busy_us - self.exposed_us) / self.busy_us * 100.0 if self.busy_us else None

    def to_dict(self, steps: int) -> dict[str, Any]:
        n = max(steps, 1)
        return {
            "type": self.type, "count": self.count, "count_per_step": self.count / n,
            "sized": self.sized, "bytes": self.bytes if self.sized else None,
            "bytes_per_step": self.bytes / n if self.sized else None,
            "time_us": self.time_us, "time_ms_per_step": self.time_us / n / 1000.0,
            "busy_us": self.busy_us, "busy_ms_per_step": self.busy_us / n / 1000.0,
            "exposed_us": self.exposed_us, "overlap_pct": self.overlap_pct,
        }


@dataclass
class Instances:
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


@dataclass
class Communication:
    source: str  # "kernels", "host ops", or "none"
    backend: str | None
    window_us: float
    steps: int
    types: list[CollectiveType]
    busy_us: float
    exposed_us: float
    per_step_ms: list[float]  # communication time (union) in each step
    instances: Instances = field(default_factory=Instances.empty, repr=False)
    notes: list[str] = field(default_factory=list)

    @property
    def overlap_pct(self) -> float | None:
        return (self.busy_us - self.exposed_us) / self.busy_us * 100.0 if self.busy_us else None

    def to_dict(self) -> dict[str, Any]:
        w, n = self.window_us, max(self.steps, 1)
        return {
            "source": self.source, "backend": self.backend, "steps": self.steps,
            "count": int(sum(t.count for t in self.types)),
            "time_pct": self.busy_us / w * 100.0 if w > 0 else 0.0,
            "exposed_pct": self.exposed_us / w * 100.0 if w > 0 else 0.0,
            "ms_per_step": self.busy_us / n / 1000.0,
            "exposed_ms_per_step": self.exposed_us / n / 1000.0,
            "overlap_pct": self.overlap_pct,
            "per_step_ms": self.per_step_ms,
            "types": [t.to_dict(self.steps) for t in self.types],
            "notes": self.notes,
        }

    def to_pandas(self) -> Any:
        return data_frame([t.to_dict(self.steps) for t in self.types])


def communication(trace: Trace, steps: StepWindows) -> Communication:
    """The communication figures of one rank over its step window."""
    start, end = steps.span
    ev = trace.events
    info = trace.metadata.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    in_window = (ev.ts < end) & (ev.end > start)
    kernels = np.flatnonzero((ev.kind == Kind.KERNEL) & ev.flagged(FLAG_COMM) & in_window)
    host = _HostComm.of(trace)
    if len(kernels):
        source, idx = "kernels", kernels
        types, nbytes = _kernel_types(trace, kernels, host)
        compute = window_sets(trace, steps).compute
    else:
        backend_ops = np.array([is_backend_collective(Kind(k), ev.names[n]) for k, n in
                                zip(ev.kind[host.ranges.index], ev.name[host.ranges.index],
                                    strict=True)], dtype=bool)
        pick = backend_ops if backend_ops.any() else host.ranges.top_level()
        idx = host.ranges.index[pick]
        idx = idx[in_window[idx]]
        source = "host ops" if len(idx) else "none"
        types, nbytes = _host_types(trace, idx, host)
        compute = _host_compute(trace, idx, start, end)
    ts, te = np.maximum(ev.ts[idx], start), np.minimum(ev.end[idx], end)
    rows = []
    for code, name in enumerate(COLLECTIVE_TYPES):
        m = types == code
        if not m.any():
            continue
        busy = iv.union(ts[m], te[m])
        sized = m & np.isfinite(nbytes)
        rows.append(CollectiveType(
            type=name, count=int(m.sum()), sized=int(sized.sum()),
            bytes=float(nbytes[sized].sum()), time_us=float((te - ts)[m].sum()),
            busy_us=busy.total(), exposed_us=exposed(busy, compute),
        ))
    rows.sort(key=lambda r: -r.time_us)
    busy = iv.union(ts, te)
    step_of = np.searchsorted(steps.starts, ev.ts[idx], side="right") - 1
    inside = (step_of >= 0) & (ev.ts[idx] < steps.ends[np.maximum(step_of, 0)])
    notes = []
    if source == "none" and backend:
        notes.append(f"distributedInfo names backend {backend!r}, but the window holds no "
                     "communication.")
    return Communication(
        source=source,
        backend=backend,
        window_us=end - start,
        steps=len(steps),
        types=rows,
        busy_us=busy.total(),
        exposed_us=exposed(busy, compute),
        per_step_ms=(iv.covered_in_windows(busy, steps.starts, steps.ends) / 1000.0).tolist(),
        instances=Instances(
            type=types.astype(np.int64),
            step=np.where(inside, steps.numbers[np.maximum(step_of, 0)], -1),
            start_us=trace.t0_us + ev.ts[idx],
            dur_us=ev.dur[idx].copy(),
            step_end_us=np.where(inside, trace.t0_us + steps.ends[np.maximum(step_of, 0)],
                                 np.inf) if len(steps) else np.full(len(idx), np.inf),
        ),
        notes=notes,
    )


def _host_compute(trace: Trace, collectives: np.ndarray, start: float, end: float) -> iv.Intervals:
    """CPU ops (not communication) on threads that run no collective: what host collectives
    can overlap with."""
    ev = trace.events
    busy = ev.of_kind(Kind.CPU_OP) & ~ev.flagged(FLAG_COMM)
    busy &= ~np.isin(ev.tid, np.unique(ev.tid[collectives]))
    return iv.clip(iv.union(ev.ts[busy], ev.end[busy]), start, end)


@dataclass
class _HostComm:
    """Host communication ranges, with what each says about type and size."""

    ranges: HostRanges
    type: np.ndarray  # per range: index into COLLECTIVE_TYPES
    nbytes: np.ndarray  # per range: message bytes, nan when unknown

    @staticmethod
    def of(trace: Trace) -> _HostComm:
        ev = trace.events
        idx = np.flatnonzero(ev.of_kind(*_HOST_KINDS) & ev.flagged(FLAG_COMM))
        ranges = HostRanges.of(ev.ts[idx], ev.end[idx], ev.tid[idx], idx)
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
    """Type code and bytes per communication kernel."""
    ev = trace.events
    names, which = np.unique(ev.name[kernels], return_inverse=True)
    types = np.array([_type_code(ev.names[n]) for n in names], dtype=np.int64)[which]
    nbytes = np.full(len(kernels), np.nan)
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
    for i, e in enumerate(kernels):  # the kernel's own args win (few kernels carry them)
        if ev.detail[e] >= 0:
            detail = ev.details[ev.detail[e]]
            if detail.get("collective"):
                types[i] = _type_code(detail["collective"])
                nbytes[i] = _message_bytes(detail)
    return types, nbytes


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
