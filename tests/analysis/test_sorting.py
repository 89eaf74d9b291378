"""The cheaper stable orders equal numpy's argsort and lexsort exactly, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis.sorting import (
    group_min_max,
    group_order,
    group_time_order,
    stable_argsort,
    unique_below,
)


@pytest.mark.parametrize("seed", range(30))
def test_orders_equal_numpys(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    group = rng.integers(0, 5, n).astype(np.int32)
    if seed % 5 == 0:
        group = group * 40_000  # beyond 16 bits: the general sort
    ts = np.sort(rng.integers(0, 50, n).astype(float) + rng.choice([0.0, 0.5], n))
    if seed % 7 == 0:
        ts = rng.permutation(ts)  # not sorted by start: the general lexsort
    tiebreak = -rng.integers(0, 4, n).astype(float)
    assert stable_argsort(group).tolist() == np.argsort(group, kind="stable").tolist()
    want = np.lexsort((tiebreak, ts, group))
    assert group_time_order(group, ts, tiebreak).tolist() == want.tolist()
    assert group_order(group, ts).tolist() == np.lexsort((ts, group)).tolist()
    values = rng.integers(0, 60, n)
    uniq, inverse = unique_below(values, 60)
    want_uniq, want_inverse = np.unique(values, return_inverse=True)
    assert uniq.tolist() == want_uniq.tolist() and inverse.tolist() == want_inverse.tolist()


def test_group_time_order_puts_the_longer_of_equal_starts_first():
    group = np.array([1, 0, 1, 0])
    ts = np.array([0.0, 0.0, 0.0, 5.0])
    longest_first = -np.array([1.0, 2.0, 9.0, 1.0])
    assert group_time_order(group, ts, longest_first).tolist() == [1, 3, 2, 0]


def test_group_min_max_equals_ufunc_at():
    rng = np.random.default_rng(3)
    group = rng.integers(0, 9, 500)  # group 9 is never drawn: stays inf / -inf
    values = rng.normal(size=500)
    values[7] = np.nan  # propagates into its group, as np.minimum.at does
    low, high = group_min_max(group, values, 10)
    want_low, want_high = np.full(10, np.inf), np.full(10, -np.inf)
    with np.errstate(invalid="ignore"):
        np.minimum.at(want_low, group, values)
        np.maximum.at(want_high, group, values)
    assert np.array_equal(low, want_low, equal_nan=True)
    assert np.array_equal(high, want_high, equal_nan=True)
    assert low[9] == np.inf and high[9] == -np.inf
