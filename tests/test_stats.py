"""trainprof.stats, the one home of the statistics every layer shares: each figure against a
small computation of its own here."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from trainprof import stats
from trainprof.analysis.job import rank_spread
from trainprof.analysis.overview import step_spread
from trainprof.diagnose import compare
from trainprof.history.views import regress


def test_robust_sigma_is_the_scaled_median_absolute_deviation():
    values = [10.0, 11.0, 9.0, 10.5, 9.5, 40.0]  # one outlier
    centre = statistics.median(values)
    mad = statistics.median(abs(v - centre) for v in values)
    assert stats.robust_sigma(values) == pytest.approx(1.4826 * mad)
    assert stats.robust_sigma(values, median=10.0) == pytest.approx(
        1.4826 * statistics.median(abs(v - 10.0) for v in values))


def test_robust_sigma_of_normal_noise_is_its_standard_deviation_and_ignores_outliers():
    rng = np.random.default_rng(7)
    noise = rng.normal(100.0, 4.0, 20_000)
    assert stats.robust_sigma(noise) == pytest.approx(4.0, rel=0.03)
    spoiled = np.concatenate([noise, np.full(200, 1e6)])  # 1% of wild values
    assert stats.robust_sigma(spoiled) == pytest.approx(4.0, rel=0.05)
    assert float(np.std(spoiled)) > 1000  # the plain standard deviation is ruined


def test_the_step_and_rank_spreads_flag_by_the_shared_sigma():
    steps = [95.0, 100.0, 105.0] * 10 + [121.0, 150.0] + [95.0, 100.0, 105.0] * 10
    centre = statistics.median(steps)
    limit = centre + 3 * 1.4826 * statistics.median(abs(s - centre) for s in steps)
    assert 121.0 < limit < 150.0 and limit > 1.2 * centre  # the sigma rule decides here
    assert step_spread.step_spread(steps).slow_steps == (31,)
    values = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 180.0]
    outliers = rank_spread.spread("step", "ms", list(range(7)), values).outliers
    assert [o.rank for o in outliers] == [6]


def test_compare_and_the_history_share_one_bootstrap():
    assert compare.slowdown_odds is regress.slowdown_odds is stats.slowdown_odds
    odds = stats.slowdown_odds([100.0] * 10, [110.0] * 10, 5.0)
    assert odds.change_pct == pytest.approx(10.0) and odds.probability == 1.0
