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
