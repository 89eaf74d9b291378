"""Memory copies by direction: count, bytes, bandwidth, time share, pageable or pinned, exposed.

Copies are the device's memcpy events inside the step window, by direction (HtoD, DtoH, DtoD,
PtoP, other) from their names, with memsets as a row of their own. "Exposed" copy time runs
with neither a compute nor a communication kernel on the rank's devices (the same sets as the
GPU timeline, analysis/overview/timeline.py). Units: bytes, µs, GB/s (10^9 bytes per second).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.exposure import cover, exposed, span_sets
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.parts import part_of
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.structs import Record
from trainprof.trace.model import (
    MEMCPY_DIRECTIONS,
    Kind,
    memcpy_direction,
    memcpy_host_memory,
)

#: Row names: the copy directions, then memsets.
KINDS = (*MEMCPY_DIRECTIONS, "memset")
#: Bytes per µs to GB/s.
_GBPS = 1e-3


class CopyRow(Record):
    """All copies of one direction (or all memsets) inside the window; the shares are of the
    window's time."""

    kind: str
    count: int
    count_per_step: float
    bytes: float  # of the copies whose size the trace records
    bytes_per_step: float
    time_us: float  # sum of durations
    #: Achieved bandwidth: bytes over the time of the copies that moved them (None: no size).
    bandwidth_gbps: float | None
    time_pct: float  # of their intervals' union
    exposed_us: float  # busy time with no compute or communication kernel running
    exposed_pct: float
    pageable_count: int = 0
    pinned_count: int = 0
    pageable_bytes: float = 0.0
    pinned_bytes: float = 0.0


class Copies(Record):
    window_ms: float
    steps: int
    rows: list[CopyRow] = field(name="kinds")  # only kinds that occur, in KINDS order
    time_pct: float  # all copies and memsets, merged
    exposed_pct: float
    exposed_ms_per_step: float

    def row(self, kind: str) -> CopyRow | None:
        return next((r for r in self.rows if r.kind == kind), None)

    def to_pandas(self) -> Any:
        return data_frame([r.to_dict() for r in self.rows])


class _Sums(msgspec.Struct):
    """One kind's copies as windows add them up (µs and bytes)."""

    kind: str
    count: int
    bytes: float
    time_us: float
    busy_us: float  # union of their intervals
    exposed_us: float
    sized_time_us: float  # duration of the copies whose size is known
    pageable_count: int = 0
    pinned_count: int = 0
    pageable_bytes: float = 0.0
    pinned_bytes: float = 0.0

    def row(self, window_us: float, steps: int) -> CopyRow:
        """Its figures over a window of ``steps`` steps."""
        per_step = max(steps, 1)
        return CopyRow(
            kind=self.kind, count=self.count, count_per_step=self.count / per_step,
            bytes=self.bytes, bytes_per_step=self.bytes / per_step, time_us=self.time_us,
            bandwidth_gbps=(self.bytes / self.sized_time_us * _GBPS if self.sized_time_us > 0
                            else None),
            time_pct=_pct(self.busy_us, window_us), exposed_us=self.exposed_us,
            exposed_pct=_pct(self.exposed_us, window_us),
            pageable_count=self.pageable_count, pinned_count=self.pinned_count,
            pageable_bytes=self.pageable_bytes, pinned_bytes=self.pinned_bytes,
        )


def _pct(us: float, window_us: float) -> float:
    return us / window_us * 100.0 if window_us > 0 else 0.0


def _copies(window_us: float, steps: int, rows: list[_Sums], busy_us: float,
            exposed_us: float) -> Copies:
    return Copies(
        window_ms=window_us / 1000.0, steps=steps, rows=[r.row(window_us, steps) for r in rows],
        time_pct=_pct(busy_us, window_us), exposed_pct=_pct(exposed_us, window_us),
        exposed_ms_per_step=exposed_us / max(steps, 1) / 1000.0,
    )


class _Part(msgspec.Struct):
    """What one window knows of the copies: rows over its part of the span, and the copies it
    owns still running at the part's end (cut at the span's end only once that is known)."""

    rows: dict[str, _Sums]
    busy_us: float
    exposed_us: float
    running: list[tuple[str, float, bool]]  # (kind, end, sized) of copies past the part's end
    any_copy: bool


def _partial(window: Window) -> _Part:
    trace, part = window.trace, part_of(window)
    start, end = part.start, part.end
    ev = trace.events
    seen = np.flatnonzero(ev.of_kind(Kind.MEMCPY, Kind.MEMSET) & part.covering(ev.ts, event_ends(ev)))
    if not len(seen) or end <= start:
        return _Part({}, 0.0, 0.0, [], False)
    own = part.owns(ev.ts[seen], event_ends(ev)[seen])
    used, which = np.unique(ev.name[seen], return_inverse=True)
    direction = np.array([memcpy_direction(ev.names[n]) for n in used], dtype=object)
    host_mem = np.array([memcpy_host_memory(ev.names[n]) for n in used], dtype=object)
    kind = np.where(ev.kind[seen] == Kind.MEMSET, "memset", direction[which])
    memory = host_mem[which]
    ts = np.maximum(ev.ts[seen], start)
    te = np.minimum(event_ends(ev)[seen], end) if part.last else event_ends(ev)[seen]
    nbytes = ev.nbytes[seen]
    sets = span_sets(trace, start, end)
    hidden_by = cover(sets.compute, sets.communication)
    rows = {}
    for k in KINDS:
        m = kind == k
        if not m.any():
            continue
        busy = iv.clip(iv.union(ts[m], te[m]), start, end)
        m &= own
        sized = m & np.isfinite(nbytes)
        pageable, pinned = m & (memory == "pageable"), m & (memory == "pinned")
        rows[k] = _Sums(
            kind=k,
            count=int(m.sum()),
            bytes=float(nbytes[sized].sum()),
            time_us=float((te - ts)[m].sum()),
            busy_us=busy.total(),
            exposed_us=exposed(busy, hidden_by),
            sized_time_us=float((te - ts)[sized].sum()),
            pageable_count=int(pageable.sum()),
            pinned_count=int(pinned.sum()),
            pageable_bytes=float(np.nansum(nbytes[pageable])),
            pinned_bytes=float(np.nansum(nbytes[pinned])),
        )
    late = np.flatnonzero(own & (te > end))
    return _Part(rows, sets.memcpy.total(), exposed(sets.memcpy, hidden_by),
                 [(str(kind[i]), float(te[i]), bool(np.isfinite(nbytes[i]))) for i in late],
                 bool(own.any()))


def _combine(parts: list[_Part], steps: StepWindows) -> Copies:
    start, end = steps.span
    if not any(p.any_copy for p in parts) or end <= start:
        return _copies(max(end - start, 0.0), len(steps), [], 0.0, 0.0)
    rows = []
    for k in KINDS:
        mine = [p.rows[k] for p in parts if k in p.rows]
        if not any(r.count for r in mine):
            continue
        row = _Sums(kind=k, count=0, bytes=0.0, time_us=0.0, busy_us=0.0, exposed_us=0.0,
                    sized_time_us=0.0)
        for r in mine:
            for name in ("count", "bytes", "time_us", "busy_us", "exposed_us", "sized_time_us",
                         "pageable_count", "pinned_count", "pageable_bytes", "pinned_bytes"):
                setattr(row, name, getattr(row, name) + getattr(r, name))
        # Copies still running at the span's end count up to there.
        for p in parts:
            for kind, te, sized in p.running:
                if kind == k and te > end:
                    row.time_us -= te - end
                    row.sized_time_us -= (te - end) if sized else 0.0
        rows.append(row)
    return _copies(end - start, len(steps), rows, sum(p.busy_us for p in parts),
                   sum(p.exposed_us for p in parts))


#: The copy figures over the step window (no rows when it has no copy or memset), computed
#: window by window (analysis/streaming/windows.py): ``copies(trace, steps)`` for a whole trace.
copies: WindowedSection[_Part, Copies] = WindowedSection(_partial, _combine, cost=0.42)
