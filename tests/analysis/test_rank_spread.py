"""The spread of a job's ranks: quantiles, histogram and outliers, checked against a plain
computation written here."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from trainprof.analysis.job.rank_spread import (
    HISTOGRAM_BINS,
    NAMED_OUTLIERS,
    OUTLIER_MIN_SHARE,
    OUTLIER_SIGMAS,
    rank_spreads,
    spread,
)
from trainprof.analysis.job.rank_table import RankRow


def percentile(values, q):
    """Linear interpolation between the closest ranks (numpy's default, written out)."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def reference_outliers(ranks, values):
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    limit = max(1.4826 * mad * OUTLIER_SIGMAS, OUTLIER_MIN_SHARE * abs(median))
    far = [(abs(v - median), r) for r, v in zip(ranks, values, strict=True) if abs(v - median) > limit]
    return [r for _, r in sorted(far, key=lambda x: -x[0])]


def test_quantiles_histogram_and_outliers_match_a_plain_computation():
    ranks = list(range(200))
    values = [100.0 + (r * 7 % 13) * 0.5 for r in ranks]  # 100 to 106 ms of noise
    values[17], values[150], values[42] = 180.0, 60.0, 111.0
    s = spread("step time", "ms", ranks, values)
    assert (s.min, s.max, s.ranks) == (60.0, 180.0, 200)
    for q, got in ((10, s.p10), (50, s.median), (90, s.p90)):
        assert got == pytest.approx(percentile(values, q))
    width = (180.0 - 60.0) / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for v in values:
        counts[min(int((v - 60.0) / width), HISTOGRAM_BINS - 1)] += 1
    assert s.counts == counts and sum(s.counts) == 200
    assert s.edges[0] == 60.0 and s.edges[-1] == 180.0 and len(s.edges) == HISTOGRAM_BINS + 1
    expected = reference_outliers(ranks, values)
    assert expected[:3] == [17, 150, 42]  # the case means what it says
    assert [o.rank for o in s.outliers] == expected[:NAMED_OUTLIERS]
    assert s.outlier_count == len(expected)
    assert [o.side for o in s.outliers[:2]] == ["high", "low"]


def test_ranks_that_all_but_agree_have_no_outliers():
    values = [100.0] * 50 + [101.0]  # the MAD is 0; 1% off is noise
    s = spread("step time", "ms", list(range(51)), values)
    assert s.outliers == [] and s.outlier_count == 0
    same = spread("idle", "%", [0, 1, 2], [30.0, 30.0, 30.0])
    assert same.counts == [3] and same.edges == [30.0, 30.0] and same.outliers == []


def test_outliers_named_are_bounded_and_counted():
    values = [10.0] * 100 + [50.0 + i for i in range(20)]
    s = spread("communication", "ms", list(range(120)), values)
    assert len(s.outliers) == NAMED_OUTLIERS and s.outlier_count == 20
    assert s.outliers[0].rank == 119  # the farthest first


def row(rank, step_ms, steps=3, idle=None, comm=None):
    return RankRow(rank=rank, windows=1, steps=steps, step_ms=step_ms, phases_ms={},
                   comm_ms=comm, exposed_comm_ms=comm, idle_pct=idle, idle_of="GPU", mark="")


def test_figures_leave_out_ranks_without_them():
    rows = [row(0, 10.0, idle=20.0), row(1, 12.0, idle=None), row(2, 0.0, steps=0, idle=40.0)]
    spreads = rank_spreads(rows)
    assert spreads["step_ms"].ranks == 2 and spreads["step_ms"].min == 10.0  # rank 2: no steps
    assert spreads["idle_pct"].ranks == 2 and spreads["idle_pct"].max == 40.0
    assert "comm_ms" not in spreads  # no rank has communication
    assert rank_spreads([row(0, 10.0)]) == {}


def test_values_closer_than_floats_can_split_make_one_bar():
    """1e-06 and its next floats cannot be cut into 12 bars (Hypothesis found it)."""
    low = 1e-06
    values = [low, np.nextafter(low, 1.0), np.nextafter(np.nextafter(low, 1.0), 1.0)]
    s = spread("idle", "%", [0, 1, 2], values)
    assert s.counts == [3] and s.edges == [low, float(values[-1])] and s.ranks == 3
