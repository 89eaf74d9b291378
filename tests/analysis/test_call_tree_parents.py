"""The call tree's parents: the search-free path for first children against the search alone."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainprof.analysis.calls.calltree import _parents


def _parents_by_search(depth: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each node's last earlier node one level up whose run covers it, searched for every node."""
    n = len(depth)
    by_key = np.argsort(depth, kind="stable")
    key = depth[by_key] * (n + 1) + by_key
    hit = np.searchsorted(key, key - (n + 1), side="left") - 1
    cand = by_key[np.maximum(hit, 0)]
    d = depth[by_key]
    ok = (d > 0) & (hit >= 0) & (depth[cand] == d - 1) & (end[cand] > by_key)
    parent = np.empty(n, dtype=np.int64)
    parent[by_key] = np.where(ok, cand, -1)
    return parent


@given(st.lists(st.integers(-1, 3), min_size=1, max_size=80), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_parents_match_a_search_for_every_node(steps, seed):
    # Depths that go down one level at a time and up any number (a depth-first order), and
    # runs that end anywhere after the node (overlapping ranges cut some short).
    depth = np.maximum(np.cumsum(np.minimum(steps, 1)), 0).astype(np.int64)
    depth[0] = 0
    n = len(depth)
    rng = np.random.default_rng(seed)
    end = np.arange(n) + 1 + rng.integers(0, 6, n)
    end = np.minimum(end, n)
    assert np.array_equal(_parents(depth, end), _parents_by_search(depth, end))
