"""Stable orders of event columns, cheaper than a general sort where the data allow it.

Each returns exactly what the numpy call it names returns (``np.argsort(kind="stable")``,
``np.lexsort``, ``np.unique``, ``np.minimum.at``): small integers (thread numbers, depths, name
groups) are ordered by a radix sort on 16 bits, columns already sorted by start time (as events
are) only have their ties sorted, and event indices are marked in a table instead of sorted.
"""

from __future__ import annotations

import numpy as np

_INT16 = np.iinfo(np.int16)


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")``; a radix sort when the values are integers that
    fit in 16 bits."""
    if (len(values) and values.dtype.kind in "iu"
            and int(values.min()) >= _INT16.min and int(values.max()) <= _INT16.max):
        return np.argsort(values.astype(np.int16), kind="stable")
    return np.argsort(values, kind="stable")


def group_time_order(group: np.ndarray, ts: np.ndarray, tiebreak: np.ndarray) -> np.ndarray:
    """``np.lexsort((tiebreak, ts, group))``: by group, then start, then ``tiebreak``, then
    position. When ``ts`` is already sorted, only runs of equal starts are sorted by
    ``tiebreak`` before a stable sort by group."""
    n = len(ts)
    if n < 2 or not np.all(ts[1:] >= ts[:-1]):
        return np.lexsort((tiebreak, ts, group))
    order = np.arange(n)
    tie = np.flatnonzero(ts[1:] == ts[:-1])
    if len(tie):
        members = np.unique(np.concatenate([tie, tie + 1]))
        # A run of equal starts: consecutive members with the same start.
        run = np.cumsum(np.r_[True, (np.diff(members) > 1) | (ts[members[1:]] != ts[members[:-1]])])
        order[members] = members[np.lexsort((tiebreak[members], run))]
    return order[stable_argsort(group[order])]


def group_order(group: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """``np.lexsort((ts, group))``; a stable sort by group alone when ``ts`` is sorted."""
    if len(ts) < 2 or not np.all(ts[1:] >= ts[:-1]):
        return np.lexsort((ts, group))
    return stable_argsort(group)


def unique_below(values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for integers in ``[0, size)`` (event
    indices): marked in a table of ``size`` instead of sorted."""
    seen = np.zeros(size, dtype=bool)
    seen[values] = True
    rank = np.cumsum(seen) - 1
    return np.flatnonzero(seen), rank[values]


def group_min_max(group: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group id in ``[0, n)``: the least and the greatest value (inf and -inf for a group
    with none), as ``np.minimum.at``/``np.maximum.at`` give them, by sorting on the group."""
    low, high = np.full(n, np.inf), np.full(n, -np.inf)
    if not len(group):
        return low, high
    order = stable_argsort(group)
    g, v = group[order], values[order]
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    low[g[heads]] = np.minimum.reduceat(v, heads)
    high[g[heads]] = np.maximum.reduceat(v, heads)
    return low, high
