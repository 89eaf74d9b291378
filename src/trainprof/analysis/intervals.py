"""Interval sets as sorted, disjoint (start, end) arrays; every operation is sorting and searchsorted.

A set is a pair of float64 arrays ``(starts, ends)`` with ``starts[i] < ends[i] <= starts[i+1]``.
Unions, intersections, differences, clipping and per-window sums never loop per event in Python.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Intervals(NamedTuple):
    """A sorted set of disjoint half-open intervals [start, end)."""

    starts: np.ndarray
    ends: np.ndarray

    @staticmethod
    def empty() -> Intervals:
        return Intervals(np.empty(0), np.empty(0))

    def __len__(self) -> int:
        return len(self.starts)

    def total(self) -> float:
        return float(np.sum(self.ends - self.starts)) if len(self.starts) else 0.0


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping, unsorted intervals into a disjoint set."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return Intervals.empty()
    # Event columns come sorted by start: skip the sort then (a stable sort keeps them as they are).
    if not np.all(starts[1:] >= starts[:-1]):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    return _merge_sorted(starts, ends)


def _merge_sorted(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge non-empty intervals sorted by start into a disjoint set."""
    reach = np.maximum.accumulate(ends)
    # A new run starts where an interval begins after everything before it has ended; a run
    # ends where the next one starts, at the furthest end reached so far.
    new_run = np.empty(len(starts), dtype=bool)
    new_run[0] = True
    np.greater(starts[1:], reach[:-1], out=new_run[1:])
    last = np.empty(len(starts), dtype=bool)
    last[:-1] = new_run[1:]
    last[-1] = True
    return Intervals(starts[new_run], reach[last])


def _pieces(a: Intervals, b: Intervals) -> Intervals:
    """``a`` and ``b`` intersected: the overlap of every pair of their intervals that meet,
    in order, with touching pieces merged into one (so no two intervals of the result touch)."""
    _, starts, ends = _overlaps(a, b)
    return _untouched(starts, ends)


def _overlaps(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty overlaps of every pair of intervals of ``a`` and ``b`` that meet, in
    order: (the ``a`` interval each lies in, starts, ends)."""
    first = np.searchsorted(b.ends, a.starts, side="right")  # b's first interval ending after
    after = np.searchsorted(b.starts, a.ends, side="left")  # b's intervals starting before end
    counts = np.maximum(after - first, 0)
    total = int(counts.sum())
    if total == len(a) and np.all(counts == 1):
        ia, jb = np.arange(len(a)), first
    else:
        ia = np.repeat(np.arange(len(a)), counts)
        offsets = np.cumsum(counts) - counts
        jb = np.arange(total) - np.repeat(offsets - first, counts)
    starts = np.maximum(a.starts[ia], b.starts[jb])
    ends = np.minimum(a.ends[ia], b.ends[jb])
    keep = ends > starts
    if not keep.all():
        ia, starts, ends = ia[keep], starts[keep], ends[keep]
    return ia, starts, ends


def _untouched(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Sorted, disjoint intervals with each run of touching ones merged into one."""
    if not len(starts):
        return Intervals.empty()
    apart = starts[1:] != ends[:-1]
    begin = np.empty(len(starts), dtype=bool)
    begin[0] = True
    begin[1:] = apart
    finish = np.empty(len(starts), dtype=bool)
    finish[:-1] = apart
    finish[-1] = True
    return Intervals(starts[begin], ends[finish])


def split(a: Intervals, b: Intervals) -> tuple[Intervals, Intervals]:
    """``(intersect(a, b), subtract(a, b))`` from one pass over the overlaps: what of ``a``
    ``b`` claims, and the gaps around those pieces in each interval of ``a``."""
    if not len(a) or not len(b):
        return Intervals.empty(), a
    ia, starts, ends = _overlaps(a, b)
    # Per interval of a: its start, then each piece's end, against each piece's start, then
    # its end; interval i's run begins after the pieces of the intervals before it.
    n, k = len(a), len(ia)
    head = np.arange(n) + (np.cumsum(np.bincount(ia, minlength=n)) - np.bincount(ia, minlength=n))
    piece = np.arange(k) + ia
    gap_starts, gap_ends = np.empty(n + k), np.empty(n + k)
    gap_starts[head] = a.starts
    gap_starts[piece + 1] = ends
    gap_ends[piece] = starts
    gap_ends[np.r_[head[1:], n + k] - 1] = a.ends
    keep = gap_ends > gap_starts
    return _untouched(starts, ends), _untouched(gap_starts[keep], gap_ends[keep])


def _complement(s: Intervals) -> Intervals:
    """Everything outside ``s``, from -inf to +inf."""
    if not np.all(s.ends > s.starts):
        s = Intervals(s.starts[s.ends > s.starts], s.ends[s.ends > s.starts])
    starts = np.concatenate([[-np.inf], s.ends])
    ends = np.concatenate([s.starts, [np.inf]])
    keep = ends > starts
    return Intervals(starts[keep], ends[keep])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if not len(a) or not len(b):
        return Intervals.empty()
    return _pieces(a, b)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    if not len(a) or not len(b):
        return a
    return _pieces(a, _complement(b))


def join(a: Intervals, b: Intervals) -> Intervals:
    if not len(a):
        return b
    if not len(b):
        return a
    starts = np.concatenate([a.starts, b.starts])
    ends = np.concatenate([a.ends, b.ends])
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return Intervals.empty()
    order = np.argsort(starts, kind="stable")
    return _merge_sorted(starts[order], ends[order])


def clip(s: Intervals, start: float, end: float) -> Intervals:
    """The part of ``s`` inside [start, end)."""
    return intersect(s, Intervals(np.array([start]), np.array([end])))


def covered_in_windows(s: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of ``s`` inside each window [starts[i], ends[i]) (windows may overlap)."""
    if not len(s.starts):
        return np.zeros(len(starts))
    # Cumulative covered length up to time t, evaluated at every window edge.
    cum = np.concatenate([[0.0], np.cumsum(s.ends - s.starts)])

    def covered_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s.starts, t, side="right")  # intervals starting at or before t
        full = cum[i]
        last = np.maximum(i - 1, 0)
        overshoot = np.where(i > 0, np.maximum(s.ends[last] - t, 0.0), 0.0)
        return full - overshoot

    return covered_until(np.asarray(ends, float)) - covered_until(np.asarray(starts, float))


def weighted_union(
    starts: np.ndarray, ends: np.ndarray, values: np.ndarray, cap: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Piecewise-constant sum of overlapping valued intervals, capped at ``cap``.

    Returns ``(points, level)`` where ``level[i]`` holds on [points[i], points[i+1]).
    """
    if not len(starts):
        return np.empty(0), np.empty(0)
    points = np.concatenate([starts, ends])
    deltas = np.concatenate([values, -values])
    order = np.argsort(points, kind="stable")
    points, deltas = points[order], deltas[order]
    level = np.cumsum(deltas)
    uniq, last = np.unique(points[::-1], return_index=True)
    level_at = level[len(points) - 1 - last]  # level after all changes at each point
    return uniq, np.minimum(np.maximum(level_at, 0.0), cap)


def weighted_total(points: np.ndarray, level: np.ndarray, start: float, end: float) -> float:
    """Integral of a piecewise-constant level over [start, end)."""
    if len(points) < 2:
        return 0.0
    seg_start = np.clip(points[:-1], start, end)
    seg_end = np.clip(points[1:], start, end)
    return float(np.sum(level[:-1] * (seg_end - seg_start)))
