"""Memory copies by direction: count, bytes, bandwidth, time share, pageable or pinned, exposed.

Copies are the device's memcpy events inside the step window, by direction (HtoD, DtoH, DtoD,
PtoP, other) from their names, with memsets as a row of their own. "Exposed" copy time runs
with neither a compute nor a communication kernel on the rank's devices (the same sets as the
GPU timeline, analysis/timeline.py). Units: bytes, µs, GB/s (10^9 bytes per second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.exposure import cover, exposed, window_sets
from trainprof.analysis.frames import data_frame
from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import (
    MEMCPY_DIRECTIONS,
    Kind,
    Trace,
    memcpy_direction,
    memcpy_host_memory,
)

#: Row names: the copy directions, then memsets.
KINDS = (*MEMCPY_DIRECTIONS, "memset")
#: Bytes per µs to GB/s.
_GBPS = 1e-3


@dataclass
class CopyRow:
    """All copies of one direction (or all memsets) inside the window."""

    kind: str
    count: int
    bytes: float  # of the copies whose size the trace records
    time_us: float  # sum of durations
    busy_us: float  # union of their intervals
    exposed_us: float  # busy time with no compute or communication kernel running
    sized_time_us: float  # duration of the copies whose size is known
    pageable_count: int = 0
    pinned_count: int = 0
    pageable_bytes: float = 0.0
    pinned_bytes: float = 0.0

    @property
    def bandwidth_gbps(self) -> float | None:
        """Achieved bandwidth: bytes over the time of the copies that moved them."""
        return self.bytes / self.sized_time_us * _GBPS if self.sized_time_us > 0 else None

    def to_dict(self, window_us: float, steps: int) -> dict[str, Any]:
        per_step = max(steps, 1)
        return {
            "kind": self.kind,
            "count": self.count,
            "count_per_step": self.count / per_step,
            "bytes": self.bytes,
            "bytes_per_step": self.bytes / per_step,
            "time_us": self.time_us,
            "bandwidth_gbps": self.bandwidth_gbps,
            "time_pct": self.busy_us / window_us * 100.0 if window_us > 0 else 0.0,
            "exposed_us": self.exposed_us,
            "exposed_pct": self.exposed_us / window_us * 100.0 if window_us > 0 else 0.0,
            "pageable_count": self.pageable_count,
            "pinned_count": self.pinned_count,
            "pageable_bytes": self.pageable_bytes,
            "pinned_bytes": self.pinned_bytes,
        }


@dataclass
class Copies:
    window_us: float
    steps: int
    rows: list[CopyRow]  # only kinds that occur, in KINDS order
    busy_us: float  # all copies and memsets, merged
    exposed_us: float

    def row(self, kind: str) -> CopyRow | None:
        return next((r for r in self.rows if r.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        w = self.window_us
        return {
            "window_ms": w / 1000.0,
            "steps": self.steps,
            "kinds": [r.to_dict(w, self.steps) for r in self.rows],
            "time_pct": self.busy_us / w * 100.0 if w > 0 else 0.0,
            "exposed_pct": self.exposed_us / w * 100.0 if w > 0 else 0.0,
            "exposed_ms_per_step": self.exposed_us / max(self.steps, 1) / 1000.0,
        }

    def to_pandas(self) -> Any:
        return data_frame([r.to_dict(self.window_us, self.steps) for r in self.rows])


def copies(trace: Trace, steps: StepWindows) -> Copies:
    """The copy figures over the step window (no rows when it has no copy or memset)."""
    start, end = steps.span
    ev = trace.events
    inside = ev.of_kind(Kind.MEMCPY, Kind.MEMSET) & (ev.ts < end) & (ev.end > start)
    idx = np.flatnonzero(inside)
    if not len(idx) or end <= start:
        return Copies(max(end - start, 0.0), len(steps), [], 0.0, 0.0)
    used, which = np.unique(ev.name[idx], return_inverse=True)
    direction = np.array([memcpy_direction(ev.names[n]) for n in used], dtype=object)
    host_mem = np.array([memcpy_host_memory(ev.names[n]) for n in used], dtype=object)
    kind = np.where(ev.kind[idx] == Kind.MEMSET, "memset", direction[which])
    memory = host_mem[which]
    ts, te = np.maximum(ev.ts[idx], start), np.minimum(ev.end[idx], end)
    nbytes = ev.nbytes[idx]
    sets = window_sets(trace, steps)
    hidden_by = cover(sets.compute, sets.communication)
    rows = []
    for k in KINDS:
        m = kind == k
        if not m.any():
            continue
        busy = iv.union(ts[m], te[m])
        sized = m & np.isfinite(nbytes)
        pageable, pinned = m & (memory == "pageable"), m & (memory == "pinned")
        rows.append(CopyRow(
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
        ))
    return Copies(
        window_us=end - start,
        steps=len(steps),
        rows=rows,
        busy_us=sets.memcpy.total(),
        exposed_us=exposed(sets.memcpy, hidden_by),
    )
