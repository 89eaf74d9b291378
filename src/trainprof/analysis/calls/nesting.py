"""Which host range encloses a moment on a thread: top-level ranges and the innermost enclosing one.

Host ranges (ops, annotations, launch calls) nest on their thread. Both questions are answered
with sorting, a running maximum and a binary tree of range maxima; no Python loop per event.
"""

from __future__ import annotations

from functools import cached_property

import msgspec
import numpy as np

from trainprof.analysis.sorting import group_time_order


class HostRanges(msgspec.Struct, dict=True):
    """Ranges of the chosen host events, sorted by (thread, start, longest first)."""

    index: np.ndarray  # int64 event index in Trace.events
    ts: np.ndarray
    end: np.ndarray
    thread: np.ndarray  # int32 into Trace.threads

    @staticmethod
    def of(ts: np.ndarray, end: np.ndarray, thread: np.ndarray, index: np.ndarray) -> HostRanges:
        order = group_time_order(thread, ts, -(end - ts))
        return HostRanges(index[order], ts[order], end[order], thread[order])

    def __len__(self) -> int:
        return len(self.ts)

    @cached_property
    def _tree(self) -> np.ndarray:
        return _max_tree(self.end)

    def top_level(self) -> np.ndarray:
        """Mask of ranges that no earlier range on their thread encloses."""
        n = len(self)
        if not n:
            return np.zeros(0, dtype=bool)
        reach = grouped_running_max(self.end, self.thread)
        top = np.ones(n, dtype=bool)
        same = self.thread[1:] == self.thread[:-1]
        top[1:] = ~same | (self.ts[1:] >= reach[:-1])
        return top

    def innermost(self, t: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """Per query (time, thread): position of the latest-starting range with
        start <= t < end on that thread, or -1."""
        t = np.asarray(t, dtype=np.float64)
        thread = np.asarray(thread)
        out = np.full(len(t), -1, dtype=np.int64)
        if not len(self) or not len(t):
            return out
        starts, q = _lifted(self.ts, self.thread, t, thread)
        # The last range starting at or before t on the same thread, then leftwards to the
        # last one still open at t: a "previous greater" search on a tree of range maxima.
        pos = np.searchsorted(starts, q, side="right")
        first = np.searchsorted(self.thread, thread, side="left")
        cand = _last_above(self._tree, pos - 1, t)
        ok = cand >= first
        ok[ok] &= (self.end[cand[ok]] > t[ok]) & (self.ts[cand[ok]] <= t[ok])
        out[ok] = cand[ok]
        return out


def grouped_running_max(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` restarted at each group (``groups`` sorted, so each
    group is one run). A loop over the groups (threads, streams: few), not a lift of each
    group above the others, which overflows or loses precision on far-apart times."""
    out = np.empty(len(values), dtype=np.float64)
    if not len(values):
        return out
    bounds = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(values)], strict=True):
        out[lo:hi] = np.maximum.accumulate(values[lo:hi])
    return out


def _lifted(ts: np.ndarray, thread: np.ndarray, t: np.ndarray, t_thread: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Range starts and query times in one sorted key space, each thread's above the ones
    before it. Times are lifted by a time offset per thread where that is exact; where the
    times are too far apart for float64 to add the offset exactly, by their rank instead."""
    unit = _lift_unit(ts, ts, t)
    top = float(max(np.abs(ts).max(initial=0.0), np.abs(t).max(initial=0.0)))
    threads = float(max(thread.max(initial=0), t_thread.max(initial=0)))
    if np.isfinite(unit) and top + (threads + 1) * unit < 2.0**52:
        return ts + thread * unit, t + t_thread * unit
    order = np.unique(np.concatenate([ts, t]))
    width = np.int64(len(order) + 1)
    return (np.searchsorted(order, ts).astype(np.int64) + thread.astype(np.int64) * width,
            np.searchsorted(order, t).astype(np.int64) + t_thread.astype(np.int64) * width)


def _lift_unit(ts: np.ndarray, end: np.ndarray, extra: np.ndarray | None = None) -> float:
    """A time offset per thread number that lifts each thread's times above every earlier
    thread's, so that one sorted array serves all threads."""
    lo = float(ts.min()) if len(ts) else 0.0
    hi = float(end.max()) if len(end) else 0.0
    if extra is not None and len(extra):
        lo, hi = min(lo, float(extra.min())), max(hi, float(extra.max()))
    return hi - lo + 1.0


def _max_tree(values: np.ndarray) -> np.ndarray:
    """A binary tree of maxima in one array: the leaves ``values`` (padded with -inf to a power
    of two) from position ``len(tree) // 2``, and node i holding the maximum of nodes 2i, 2i+1."""
    size = 1 << max(len(values) - 1, 0).bit_length()
    tree = np.full(2 * size, -np.inf)
    tree[size:size + len(values)] = np.where(np.isnan(values), np.inf, values)  # nan: a wall
    level = size
    while level > 1:
        tree[level // 2:level] = np.maximum(tree[level:2 * level:2], tree[level + 1:2 * level:2])
        level //= 2
    return tree


def _last_above(tree: np.ndarray, last: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query, the largest leaf position ``<= last`` whose value exceeds ``t``, or -1.

    Up from the leaf while the left neighbours of the path hold nothing above ``t``, then down
    the first such neighbour, always into its right child when that holds a value above ``t``.
    Each step works only on the queries still moving (most stop within a few levels)."""
    size = len(tree) // 2
    out = np.full(len(last), -1, dtype=np.int64)
    node = np.where(last >= 0, last + size, 0)
    here = (last >= 0) & (tree[node] > t)
    out[here] = last[here]
    climbing = np.flatnonzero((last >= 0) & ~here)
    descending = []
    while len(climbing):
        at = node[climbing]
        left = at - 1
        turn = ((at & 1) == 1) & (tree[left] > t[climbing])
        descending.append((climbing[turn], left[turn]))
        up = at[~turn] >> 1
        keep = up > 1  # the root: nothing on the left
        climbing = climbing[~turn][keep]
        node[climbing] = up[keep]
    if not descending:
        return out
    which = np.concatenate([d[0] for d in descending])
    at = np.concatenate([d[1] for d in descending])
    while len(which):
        inner = at < size
        out[which[~inner]] = at[~inner] - size
        which, at = which[inner], at[inner]
        right = 2 * at + 1
        at = np.where(tree[right] > t[which], right, right - 1)
    return out


def innermost_on_any_thread(ranges: HostRanges, t: np.ndarray) -> np.ndarray:
    """For queries whose thread is unknown: the shortest of each thread's innermost range
    enclosing t (position in ``ranges``), or -1."""
    best = np.full(len(t), -1, dtype=np.int64)
    best_dur = np.full(len(t), np.inf)
    for thread in np.unique(ranges.thread):
        pos = ranges.innermost(t, np.full(len(t), thread))
        ok = pos >= 0
        dur = np.full(len(t), np.inf)
        dur[ok] = ranges.end[pos[ok]] - ranges.ts[pos[ok]]
        better = dur < best_dur
        best[better], best_dur[better] = pos[better], dur[better]
    return best


def enclosing_chain(ranges: HostRanges, t: float, thread: int) -> np.ndarray:
    """Positions of every range enclosing t on a thread, outermost first."""
    lo = np.searchsorted(ranges.thread, thread, side="left")
    hi = np.searchsorted(ranges.thread, thread, side="right")
    ts, end = ranges.ts[lo:hi], ranges.end[lo:hi]
    return lo + np.flatnonzero((ts <= t) & (end > t))
