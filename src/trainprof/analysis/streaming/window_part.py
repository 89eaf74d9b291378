"""The part of the step span one window answers for, shared by the sections that stream.

The step span (first step's start to last step's end) is cut where each window's first step
starts: window ``k`` answers for ``[start, end)``, its region (``Window.region``: from its first
step's start to the next window's first step's start) inside the span, the first window from
the span's start and the last to the span's end. The parts tile the span, so
a time measure (a union's length, exposed time) is the sum of each part's measure, and each
event that overlaps the span is owned by the one part where its start, clipped to the span,
falls. The window's margin holds what overlaps a part but started in the step before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.streaming.windows import Window


@dataclass(frozen=True)
class Part:
    """The time a window answers for: ``[start, end)`` of the step span."""

    start: float
    end: float
    first: bool
    last: bool

    def owns(self, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
        """Events (start, end) that overlap the span and whose clipped start is in the part."""
        mine = ts < self.end
        return mine & (te > self.start) if self.first else mine & (ts >= self.start)

    def owns_instants(self, ts: np.ndarray) -> np.ndarray:
        """Points owned by the part, the first and last reaching out to the trace's ends."""
        mine = np.ones(len(ts), dtype=bool)
        if not self.first:
            mine &= ts >= self.start
        if not self.last:
            mine &= ts < self.end
        return mine

    def covering(self, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
        """Events that overlap the part or that it owns (an instant at its start)."""
        return (ts < self.end) & ((te > self.start) | (ts >= self.start))


def part_of(window: Window) -> Part:
    """The part of the step span ``window`` answers for: its region (``Window.region``) inside
    the span of every step (``Window.span``)."""
    if not len(window.steps):
        return Part(0.0, 0.0, window.first, window.last)
    lo, hi = window.region
    span_start, span_end = window.span
    return Part(max(lo, span_start), min(hi, span_end), window.first, window.last)


@dataclass
class Carried:
    """Work a window owns that runs on past its part's end (counted in the steps after it), and
    its own work at the start of its part that such work from the window before may overlap
    (so that time covered by both counts once)."""

    running: list[tuple[float, float]]  # (the part's end, the work's end)
    head: list[tuple[float, float]]  # the window's own work, up to the margin's reach


def carried(part: Part, ts: np.ndarray, te: np.ndarray, margin_ts: np.ndarray,
            margin_te: np.ndarray) -> Carried:
    """``Carried`` from the window's own work (``ts``, ``te``) and the work of the same kind it
    sees in its margin (``margin_*``: started before the part, maybe the window before's)."""
    late = te > part.end
    before = margin_te[margin_ts < part.start]
    reach = float(before.max()) if len(before) else part.start
    head = iv.clip(iv.union(ts, te), part.start, reach) if reach > part.start else \
        iv.Intervals.empty()
    return Carried([(part.end, float(e)) for e in te[late]],
                   list(zip(head.starts.tolist(), head.ends.tolist(), strict=True)))


def carried_over(parts: list[Carried]) -> iv.Intervals:
    """The time work carried past its window covers that the later windows' own work does not."""
    running = [r for p in parts for r in p.running]
    if not running:
        return iv.Intervals.empty()
    head = [h for p in parts for h in p.head]
    covered = iv.union(np.array([r[0] for r in running]), np.array([r[1] for r in running]))
    if not head:
        return covered
    return iv.subtract(covered, iv.union(np.array([h[0] for h in head]),
                                         np.array([h[1] for h in head])))
