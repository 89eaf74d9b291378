"""Memory curves: down-sampling for display and growth from step to step (a leak's slope)."""

from __future__ import annotations

import numpy as np

from trainprof.analysis.overview.steps import StepWindows

#: A leak: allocated memory at step ends rises by at least this much per step (MB = 10^6
#: bytes, least-squares slope), in at least this share of step-to-step changes, over at least
#: this many steps.
LEAK_MIN_MB_PER_STEP = 1.0
LEAK_MIN_RISING_SHARE = 0.75
LEAK_MIN_STEPS = 3
_MB = 1e6


def downsample(values: np.ndarray, others: np.ndarray | None, points: int) -> np.ndarray:
    """Indices of at most ``points`` samples: each bucket's min and max of every series, in
    time order, so that peaks and troughs survive (the first and last samples are kept)."""
    n = len(values)
    if n <= points:
        return np.arange(n)
    series = [values] + ([others] if others is not None else [])
    per_bucket = 2 * len(series)
    buckets = max((points - 2) // per_bucket, 1)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = [np.array([0, n - 1])]
    for y in series:
        for reduce in (np.minimum, np.maximum):
            # Position of each bucket's extreme: reduceat gives the value, a match finds it.
            extreme = reduce.reduceat(y, edges[:-1])
            bucket = np.repeat(np.arange(buckets), np.diff(edges))
            hit = np.flatnonzero(y == extreme[bucket])
            first = np.unique(bucket[hit], return_index=True)[1]
            keep.append(hit[first])
    return np.unique(np.concatenate(keep))


def growth(ts: np.ndarray, allocated: np.ndarray, start_level: float, steps: StepWindows
           ) -> tuple[list[tuple[int, float]], float | None, float | None, bool]:
    """Allocated memory at each step's end, its slope in MB/step, the share of rising steps and
    whether that looks like a leak. ``start_level`` is the level before the first event."""
    if not len(steps):
        return [], None, None, False
    last = np.searchsorted(ts, steps.ends, side="right") - 1
    at_end = np.where(last >= 0, allocated[np.maximum(last, 0)], start_level)
    return trend(steps.numbers, at_end)


def trend(numbers: np.ndarray, at_end: np.ndarray
          ) -> tuple[list[tuple[int, float]], float | None, float | None, bool]:
    """``growth`` from the allocated memory at each step's end."""
    ends = [(int(s), float(a)) for s, a in zip(numbers, at_end, strict=True)]
    if len(at_end) < 2:
        return ends, None, None, False
    slope = float(np.polyfit(np.arange(len(at_end)), at_end / _MB, 1)[0])
    rising = float(np.mean(np.diff(at_end) > 0))
    leak = (len(at_end) >= LEAK_MIN_STEPS and slope >= LEAK_MIN_MB_PER_STEP
            and rising >= LEAK_MIN_RISING_SHARE)
    return ends, slope, rising, leak
