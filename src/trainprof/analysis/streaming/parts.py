"""What a window's part of a section carries, shared by the sections that stream.

The step span (first step's start to last step's end) is cut where each window's first step
starts: window ``k`` answers for ``[start, end)``, its region (``Window.region``: from its first
step's start to the next window's first step's start) inside the span, the first window from
the span's start and the last to the span's end. The parts tile the span, so
a time measure (a union's length, exposed time) is the sum of each part's measure, and each
event that overlaps the span is owned by the one part where its start, clipped to the span,
falls. The window's margin holds what overlaps a part but started in the step before.

Work still running at a part's end is carried (``Carried``) to the windows after it. A
distribution (mean, median, p90, max) over every event of the trace is carried as its distinct
values and how often each occurs (``ValueCounts``), so the combined summary is exact while a
part stays as small as the number of distinct values.
"""


from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window
from trainprof.analysis.tabular import Quantiles, summary


class Part(msgspec.Struct, frozen=True):
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


class Carried(msgspec.Struct):
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


class ValueCounts(msgspec.Struct):
    """A sample as its distinct values (ascending) and their counts."""

    values: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, sample: np.ndarray) -> ValueCounts:
        values, counts = np.unique(np.asarray(sample, dtype=np.float64), return_counts=True)
        return cls(values, counts)

    @classmethod
    def merged(cls, parts: list[ValueCounts]) -> ValueCounts:
        if not parts:
            return cls(np.empty(0), np.empty(0, dtype=np.int64))
        values = np.concatenate([p.values for p in parts])
        counts = np.concatenate([p.counts for p in parts])
        uniq, inverse = np.unique(values, return_inverse=True)
        return cls(uniq, np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64))

    def __len__(self) -> int:
        return int(self.counts.sum())

    def greater_than(self, limit: float) -> int:
        return int(self.counts[self.values > limit].sum())

    def summary(self) -> Quantiles:
        """``tabular.summary`` of the whole sample (numpy's median and linear percentile)."""
        n = len(self)
        if not n:
            return summary(np.empty(0))
        return Quantiles(mean=float((self.values * self.counts).sum() / n),
                         median=float((self._at((n - 1) // 2) + self._at(n // 2)) / 2.0),
                         p90=self._percentile(90.0, n), max=float(self.values[-1]))

    def _at(self, k: int) -> float:
        """The k-th smallest value (0-based)."""
        return float(self.values[np.searchsorted(np.cumsum(self.counts), k, side="right")])

    def _percentile(self, q: float, n: int) -> float:
        pos = q / 100.0 * (n - 1)
        lo = int(np.floor(pos))
        a, b = self._at(lo), self._at(min(lo + 1, n - 1))
        t = pos - lo
        return float(a + (b - a) * t) if t < 0.5 else float(b - (b - a) * (1.0 - t))


def no_steps() -> StepWindows:
    """Step windows with no step (for sections called without steps)."""
    empty = np.empty(0)
    return StepWindows(numbers=np.empty(0, dtype=np.int64), starts=empty, ends=empty,
                       source="whole trace")
