"""The innermost enclosing host range equals a brute-force search, overlapping ranges included."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis.calls.nesting import HostRanges


def brute_innermost(r: HostRanges, t: float, thread: int) -> int:
    """The last range in (thread, start, longest first) order that is open at t."""
    hits = [i for i in range(len(r)) if r.thread[i] == thread and r.ts[i] <= t < r.end[i]]
    return hits[-1] if hits else -1


@pytest.mark.parametrize("seed", range(25))
def test_innermost_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    ts = rng.integers(0, 200, n).astype(float)
    end = ts + rng.integers(0, 40, n)  # nested, overlapping and empty ranges
    thread = rng.integers(0, 3, n)
    r = HostRanges.of(ts, end, thread, np.arange(n))
    t = rng.integers(-5, 250, 200) + rng.choice([0.0, 0.5], 200)
    q_thread = rng.integers(0, 4, 200)
    got = r.innermost(t, q_thread)
    assert got.tolist() == [brute_innermost(r, x, int(th)) for x, th in zip(t, q_thread, strict=True)]


def test_innermost_of_nested_calls():
    # Thread 0: step [0, 100) > forward [10, 50) > matmul [20, 30); thread 1: one op [0, 5).
    r = HostRanges.of(np.array([0.0, 10.0, 20.0, 0.0]), np.array([100.0, 50.0, 30.0, 5.0]),
                      np.array([0, 0, 0, 1]), np.arange(4))
    got = r.innermost(np.array([25.0, 40.0, 60.0, 100.0, 3.0, 7.0]), np.array([0, 0, 0, 0, 1, 1]))
    assert r.index[got[:3]].tolist() == [2, 1, 0]
    assert got[3] == -1 and r.index[got[4]] == 3 and got[5] == -1
