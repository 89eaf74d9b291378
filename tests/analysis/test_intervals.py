"""Interval-set operations agree with a brute-force check on a fine grid."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis import intervals as iv


def grid_mask(starts, ends, size=256):
    mask = np.zeros(size, dtype=bool)
    for s, e in zip(starts, ends, strict=True):
        mask[int(s):int(e)] = True
    return mask


def random_set(rng, n=15):
    s = rng.integers(0, 190, n).astype(float)
    return s, s + rng.integers(0, 25, n)


@pytest.mark.parametrize("seed", range(20))
def test_set_operations_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    a_raw, b_raw = random_set(rng), random_set(rng)
    a, b = iv.union(*a_raw), iv.union(*b_raw)
    ga, gb = grid_mask(*a_raw), grid_mask(*b_raw)
    assert a.total() == ga.sum()
    assert iv.intersect(a, b).total() == (ga & gb).sum()
    assert iv.subtract(a, b).total() == (ga & ~gb).sum()
    assert iv.join(a, b).total() == (ga | gb).sum()
    # Disjoint and sorted.
    u = iv.join(a, b)
    assert np.all(u.starts[1:] > u.ends[:-1]) and np.all(u.ends > u.starts)
    windows_s = np.array([0.0, 50.0, 120.0])
    windows_e = np.array([60.0, 130.0, 200.0])
    covered = iv.covered_in_windows(a, windows_s, windows_e)
    for k in range(3):
        assert covered[k] == ga[int(windows_s[k]):int(windows_e[k])].sum()


def test_weighted_union_sums_and_caps():
    # Two kernels overlapping on [5, 10): 0.6 + 0.7 capped at 1.
    points, level = iv.weighted_union(np.array([0.0, 5.0]), np.array([10.0, 15.0]),
                                      np.array([0.6, 0.7]))
    assert iv.weighted_total(points, level, 0, 20) == pytest.approx(5 * 0.6 + 5 * 1.0 + 5 * 0.7)
    assert iv.weighted_total(points, level, 0, 5) == pytest.approx(3.0)


def test_negative_times_are_handled():
    u = iv.union(np.array([-50.0, -45.0, -10.0]), np.array([-40.0, -30.0, -5.0]))
    assert list(u.starts) == [-50.0, -10.0] and list(u.ends) == [-30.0, -5.0]
    assert u.total() == 25.0


def sweep_reference(a, b, op):
    """The set operation on the elementary segments between every boundary (the slow way)."""
    points = np.unique(np.concatenate([a.starts, a.ends, b.starts, b.ends]))
    left = points[:-1]

    def inside(s):
        return np.array([any(x >= st and x < en for st, en in zip(s.starts, s.ends, strict=True))
                         for x in left], dtype=bool)

    keep = {"and": inside(a) & inside(b), "sub": inside(a) & ~inside(b),
            "or": inside(a) | inside(b)}[op]
    edges = np.diff(np.concatenate([[False], keep, [False]]).astype(np.int8))
    return points[np.flatnonzero(edges == 1)], points[np.flatnonzero(edges == -1)]


@pytest.mark.parametrize("seed", range(40))
def test_set_operations_return_the_exact_boundaries(seed):
    # Fractional times, touching intervals, open ends: every result is the canonical set (sorted,
    # no two intervals touching) made of the operands' own boundary values.
    rng = np.random.default_rng(seed)

    def raw():
        s = rng.integers(0, 60, 12) + rng.choice([0.0, 0.25, 0.5], 12)
        return s, s + rng.integers(0, 12, 12) * rng.choice([0.5, 1.0], 12)

    a, b = iv.union(*raw()), iv.union(*raw())
    if seed % 3 == 0:
        a = iv.join(a, iv.Intervals(np.array([-np.inf]), np.array([4.0])))
        b = iv.join(b, iv.Intervals(np.array([55.5]), np.array([np.inf])))
    for op, fn in (("and", iv.intersect), ("sub", iv.subtract), ("or", iv.join)):
        got = fn(a, b)
        want_s, want_e = sweep_reference(a, b, op)
        assert got.starts.tolist() == want_s.tolist() and got.ends.tolist() == want_e.tolist()
        assert np.all(got.starts[1:] > got.ends[:-1]) and np.all(got.ends > got.starts)
    # split is intersect and subtract at once, to the last bit.
    for x, y in ((a, b), (b, a), (a, iv.Intervals.empty())):
        inside, outside = iv.split(x, y)
        assert inside.starts.tolist() == iv.intersect(x, y).starts.tolist()
        assert inside.ends.tolist() == iv.intersect(x, y).ends.tolist()
        assert outside.starts.tolist() == iv.subtract(x, y).starts.tolist()
        assert outside.ends.tolist() == iv.subtract(x, y).ends.tolist()


def test_touching_intervals_merge_into_one():
    u = iv.union(np.array([0.0, 5.0, 20.0]), np.array([5.0, 10.0, 30.0]))
    assert u.starts.tolist() == [0.0, 20.0] and u.ends.tolist() == [10.0, 30.0]
    # Two pieces of the result meeting at 10 are one interval.
    halves = iv.Intervals(np.array([0.0, 10.0]), np.array([10.0, 20.0]))
    whole = iv.Intervals(np.array([5.0]), np.array([15.0]))
    got = iv.intersect(halves, whole)
    assert got.starts.tolist() == [5.0] and got.ends.tolist() == [15.0]
    got = iv.subtract(iv.Intervals(np.array([0.0]), np.array([30.0])), halves)
    assert got.starts.tolist() == [20.0] and got.ends.tolist() == [30.0]

