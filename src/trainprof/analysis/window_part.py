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

from trainprof.analysis.windows import Window


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
