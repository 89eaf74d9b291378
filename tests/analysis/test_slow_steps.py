"""Slow steps: outliers against a robust spread, and their period."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof.analysis.overview.steps import StepStats, StepWindows, step_stats


def stats(ms: list[float]) -> StepStats:
    ends = np.cumsum(np.array(ms) * 1000.0)
    starts = np.concatenate([[0.0], ends[:-1]])
    return step_stats(StepWindows(np.arange(1, len(ms) + 1), starts, ends, "ProfilerStep"))


def test_periodic_slow_steps_and_their_period():
    s = stats([10, 11, 9, 40, 10, 10, 11, 41, 9, 10, 10, 39, 10])
    assert s.slow_steps == [4, 8, 12] and s.slow_period == 4 and s.slow_episodes == 3
    assert s.slow_excess_ms == pytest.approx((30 + 31 + 29) / 13)


def test_the_last_step_is_never_an_outlier():
    """The profiler stops inside it."""
    s = stats([10, 11, 9, 10, 10, 10, 11, 10, 9, 30])
    assert s.slow_steps == [] and s.slow_excess_ms == 0


def test_noise_is_not_slow():
    """Steps spread by scheduling noise (7-21 ms around 13) have no outlier."""
    s = stats([12.2, 16.3, 13.3, 11.1, 21.0, 7.1, 13.4, 15.6, 11.7, 16.3])
    assert s.slow_steps == [] and s.slow_excess_ms == 0 and s.slow_period is None


def test_consecutive_slow_steps_have_no_period():
    s = stats([10, 10, 10, 10, 10, 10, 30, 30, 30, 10])
    assert s.slow_steps == [7, 8, 9] and s.slow_period is None
    assert s.slow_episodes == 1  # one burst
