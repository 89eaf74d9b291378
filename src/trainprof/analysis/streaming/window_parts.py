"""Pieces the windowed sections share: the events a window owns, and exact distributions.

A window answers for the events that start in its region (``Window.region``: from its first
step's start to the next window's); the margin is only there to see what they touch. A distribution (mean, median, p90, max) over every event of the
trace is carried as the distinct values and how often each occurs, so the combined summary is
exact while a part stays as small as the number of distinct values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window
from trainprof.analysis.tabular import summary


def owns(window: Window, ts: np.ndarray) -> np.ndarray:
    """Which of these start times lie in the window's region (each time in one window's)."""
    lo, hi = window.region
    return (ts >= lo) & (ts < hi)


@dataclass
class ValueCounts:
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

    def summary(self) -> dict[str, float | None]:
        """``tabular.summary`` of the whole sample (numpy's median and linear percentile)."""
        n = len(self)
        if not n:
            return summary(np.empty(0))
        return {"mean": float((self.values * self.counts).sum() / n),
                "median": float((self._at((n - 1) // 2) + self._at(n // 2)) / 2.0),
                "p90": self._percentile(90.0, n),
                "max": float(self.values[-1])}

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
