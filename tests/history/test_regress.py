"""Regressions against a rolling baseline: a step change is flagged where it happens, noise is not."""

from __future__ import annotations

import numpy as np
import pytest

from trainprof import stats
from trainprof.history.store.rows import RunRecord
from trainprof.history.views import regress
from trainprof.history.views.regress import series_of

CHANGE_AT = 18  # the first run at the new level (0-based)


def run(i: int, steps: list[float], **fields) -> RunRecord:
    fields.setdefault("step_ms_median", float(np.median(steps)) if steps else None)
    return RunRecord(name="model", kind="step_timer", recorded_at=1000.0 + i, id=i + 1,
                     step_times_ms=list(steps), **fields)


def stepped_series(seed: int, before: float = 100.0, after: float = 112.0, runs: int = 30,
                   steps: int = 40, step_noise: float = 0.08, run_noise: float = 0.01):
    """Runs whose level jumps from ``before`` to ``after`` at CHANGE_AT: each run has its own
    level (run-to-run noise) and lognormal step-to-step noise around it."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(runs):
        level = (before if i < CHANGE_AT else after) * (1 + rng.normal(0, run_noise))
        out.append(run(i, (level * rng.lognormal(0, step_noise, steps)).tolist()))
    return out


@pytest.mark.parametrize("seed", range(10))
def test_a_step_change_is_flagged_at_the_change_point_only(seed):
    (series,) = series_of(stepped_series(seed))
    flagged = series.flagged()
    assert [p.ids for p, _ in flagged] == [[CHANGE_AT + 1]]
    point, verdict = flagged[0]
    assert verdict.status == "regression"
    assert 5 < verdict.change_pct < 20
    assert verdict.baseline_ms == pytest.approx(100, rel=0.03)  # the old level, not the new
    assert verdict.odds is not None and verdict.odds.probability >= regress.CONFIDENCE
    assert {v.status for v in series.verdicts[:CHANGE_AT]} <= {"first", "baseline", "steady"}
    assert {v.status for v in series.verdicts[CHANGE_AT + 1:]} <= {"baseline", "steady"}


@pytest.mark.parametrize("seed", range(5))
def test_a_drop_is_flagged_as_an_improvement(seed):
    (series,) = series_of(stepped_series(seed, before=100.0, after=85.0))
    assert [(p.ids, v.status) for p, v in series.flagged()] == [([CHANGE_AT + 1], "improvement")]


def test_noise_larger_than_the_change_flags_nothing():
    # 4% step change, 15% step noise over 10 steps and 3% run-to-run noise: not detectable.
    for seed in range(5):
        (series,) = series_of(stepped_series(seed, after=104.0, steps=10, step_noise=0.15,
                                             run_noise=0.03))
        assert series.flagged() == []


def test_the_noise_band_widens_with_noise_and_narrows_with_runs():
    rng = np.random.default_rng(1)
    quiet = (100 * (1 + rng.normal(0, 0.01, 20))).tolist()
    noisy = (100 * (1 + rng.normal(0, 0.04, 20))).tolist()
    assert stats.noise_band_pct([noisy], 5) > 2.5 * stats.noise_band_pct([quiet], 5)
    few, many = noisy[:6], noisy
    assert stats.noise_band_pct([few], 5) > stats.noise_band_pct([many], 5)
    assert stats.noise_band_pct([noisy[:4]], 5) is None  # too few runs to know the noise
    # A step between two levels is not noise: each level's runs are differenced apart.
    levels = [quiet[:10], [m * 1.3 for m in quiet[10:]]]
    assert stats.noise_band_pct(levels, 5) < 1.5 * stats.noise_band_pct([quiet], 5)


def test_the_t_quantile_matches_the_tables():
    for df, exact in ((5, 6.869), (10, 4.587), (30, 3.646)):  # p = 0.9995
        assert stats.t_quantile(0.9995, df) == pytest.approx(exact, rel=0.01)


def test_the_first_runs_build_the_baseline_unflagged():
    runs = [run(i, [], step_ms_median=m) for i, m in enumerate([100, 101, 150, 99, 100])]
    (series,) = series_of(runs)
    assert [v.status for v in series.verdicts] == ["first"] + ["baseline"] * 4
    assert series.verdicts[2].change_pct == pytest.approx(49.3, abs=0.1)


def test_without_step_times_the_medians_decide():
    runs = [run(i, [], step_ms_median=100.0 + (i % 3) * 0.5) for i in range(8)]
    runs.append(run(8, [], step_ms_median=120.0))
    (series,) = series_of(runs)
    ((point, verdict),) = series.flagged()
    assert point.ids == [9] and verdict.status == "regression" and verdict.odds is None


def test_a_change_of_batch_size_starts_a_new_baseline_unflagged():
    rng = np.random.default_rng(0)
    runs = [run(i, (100 * rng.lognormal(0, 0.02, 30)).tolist(), samples_per_step=32)
            for i in range(8)]
    runs += [run(i, (190 * rng.lognormal(0, 0.02, 30)).tolist(), samples_per_step=64)
             for i in range(8, 12)]
    (series,) = series_of(runs)
    assert [v.status for v in series.verdicts[7:]] == ["steady", "new setup"] + ["baseline"] * 3
    assert series.verdicts[9].baseline_ms > 180  # against the new setup, the noise learnt again
    assert series.flagged() == []


def test_the_ranks_of_one_job_are_one_point():
    rng = np.random.default_rng(0)
    rows = []
    for job in range(4):
        for rank in range(3):  # every rank writes its own row, a moment apart
            steps = (100 * rng.lognormal(0, 0.02, 20)).tolist()
            rows.append(RunRecord(name="ddp", kind="step_timer", recorded_at=job * 1e4 + rank,
                                  id=len(rows) + 1, job=f"job{job}", rank=rank, world_size=3,
                                  step_times_ms=steps, step_ms_median=float(np.median(steps)),
                                  samples_per_s=100.0))
    (series,) = series_of(rows)
    assert [p.ids for p in series.points] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]
    assert series.points[0].samples_per_s == 300.0  # the job's throughput: every rank's
    assert len(series.points[0].step_times_ms) == 60


def test_runs_of_other_names_and_kinds_are_separate_series():
    rows = [RunRecord(name=n, kind=k, recorded_at=float(i), id=i + 1, step_ms_median=10.0)
            for i, (n, k) in enumerate([("a", "analysis"), ("b", "analysis"), ("a", "run")])]
    assert [(s.name, s.kind, len(s.points)) for s in series_of(rows)] == [
        ("a", "analysis", 1), ("a", "run", 1), ("b", "analysis", 1)]
