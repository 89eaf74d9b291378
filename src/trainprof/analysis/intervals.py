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
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return Intervals.empty()
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    # A new run starts where an interval begins after everything before it has ended.
    new_run = np.empty(len(starts), dtype=bool)
    new_run[0] = True
    new_run[1:] = starts[1:] > reach[:-1]
    run_ids = np.cumsum(new_run) - 1
    out_starts = starts[new_run]
    out_ends = np.full(len(out_starts), -np.inf)
    np.maximum.at(out_ends, run_ids, ends)
    return Intervals(out_starts, out_ends)


def _combine(a: Intervals, b: Intervals, op: str) -> Intervals:
    points = np.unique(np.concatenate([a.starts, a.ends, b.starts, b.ends]))
    if len(points) < 2:
        return Intervals.empty()
    left = points[:-1]
    in_a = _contains(a, left)
    in_b = _contains(b, left)
    if op == "and":
        inside = in_a & in_b
    elif op == "sub":
        inside = in_a & ~in_b
    else:
        inside = in_a | in_b
    return _runs(points, inside)


def _contains(s: Intervals, points: np.ndarray) -> np.ndarray:
    """Whether each point lies in [start, end) of some interval of ``s``."""
    if not len(s.starts):
        return np.zeros(len(points), dtype=bool)
    idx = np.searchsorted(s.starts, points, side="right") - 1
    ok = idx >= 0
    out = np.zeros(len(points), dtype=bool)
    out[ok] = points[ok] < s.ends[idx[ok]]
    return out


def _runs(points: np.ndarray, inside: np.ndarray) -> Intervals:
    """Elementary segments [points[i], points[i+1]) marked inside, merged into intervals."""
    if not inside.any():
        return Intervals.empty()
    edges = np.diff(np.concatenate([[False], inside, [False]]).astype(np.int8))
    begin = np.flatnonzero(edges == 1)
    finish = np.flatnonzero(edges == -1)
    return Intervals(points[begin], points[finish])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if not len(a) or not len(b):
        return Intervals.empty()
    return _combine(a, b, "and")


def subtract(a: Intervals, b: Intervals) -> Intervals:
    if not len(a) or not len(b):
        return a
    return _combine(a, b, "sub")


def join(a: Intervals, b: Intervals) -> Intervals:
    if not len(a):
        return b
    if not len(b):
        return a
    return _combine(a, b, "or")


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
