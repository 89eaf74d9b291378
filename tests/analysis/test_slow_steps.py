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


def test_what_the_slow_steps_did():
    """Ops per step and where the slow steps' excess went, against the arrays by hand."""
    ms = [10, 11, 9, 40, 10, 10, 11, 41, 9, 10, 10, 39, 10]
    ends = np.cumsum(np.array(ms) * 1000.0)
    starts = np.concatenate([[0.0], ends[:-1]])
    w = StepWindows(np.arange(1, len(ms) + 1), starts, ends, "ProfilerStep")
    ops = np.array([200] * 13)
    ops[[3, 7, 11]] = [600, 640, 620]  # steps 4, 8 and 12 run an evaluation
    cpu = np.array([m * 900.0 for m in ms])  # 90% in ops, 10% between them
    other = np.array([m * 100.0 for m in ms])
    s = step_stats(w, ops, {"cpu_exec": cpu, "other": other, "kernel": np.zeros(13)})
    assert s.slow_steps == [4, 8, 12]
    assert s.ops_per_step == 200 and s.slow_step_ops == pytest.approx(620)
    # slow: 40, 41, 39 ms (mean 40); the others' median: 10 ms
    assert s.slow_excess_by_category_ms == pytest.approx({"cpu_exec": 27.0, "other": 3.0})
    assert list(s.slow_excess_by_category_ms) == ["cpu_exec", "other"]  # largest first
    assert "kernel" not in s.slow_excess_by_category_ms  # did not grow


def test_without_ops_or_slow_steps_nothing_is_said():
    w = StepWindows(np.arange(3), np.array([0.0, 10.0, 20.0]), np.array([10.0, 20.0, 30.0]),
                    "ProfilerStep")
    s = step_stats(w, np.zeros(3, dtype=np.int64), {"other": np.full(3, 10.0)})
    assert s.ops_per_step is None and s.slow_step_ops is None
    assert s.slow_excess_by_category_ms == {}
    assert "ops_per_step" not in s.to_dict() and "slow_excess_by_category_ms" not in s.to_dict()
