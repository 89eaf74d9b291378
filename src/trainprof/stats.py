"""Shared statistics: how sure a change in step time is, and how far runs stray by noise alone.
One home for both, used by ``trainprof compare`` (gate and verdict) and the run history.

**How sure a slowdown is** (``slowdown_odds``): a bootstrap of the change in median step time.
Each run's steps are resampled with replacement (``RESAMPLES`` times, a fixed seed so the answer
is reproducible); the change in median is computed for each pair of resamples. The share of
resamples in which NEW is slower than BASE by more than the limit is the confidence, and the
5th-95th percentiles are the 90% interval.

The unit resampled is a step, not a step of one rank: the ranks of one job wait for each other,
so their times for the same step move together. Times that share a step number are resampled
as one cluster (a cluster bootstrap); pooling them as independent values would make the
interval about sqrt(ranks) times too narrow. The median itself is over every value.

**How far a run's median may stray from its baseline by run-to-run noise** (``noise_band_pct``):
the run-to-run standard deviation comes from successive runs within a level (the differences of
neighbouring medians, in percent of their level: blind to a slow drift, and never across a
flagged change or a change of setup). It is estimated from a few runs, so the band uses
Student's t quantile for that many differences rather than the normal one: with few runs the
band is wide, and it narrows as the history grows. Runs are assumed independent and roughly
normal around their level.

**A spread that outliers cannot inflate** (``robust_sigma``): 1.4826 times the median absolute
deviation, the standard deviation of normal noise (slow steps, outlying ranks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from msgspec import field

from trainprof.structs import Derived, Record

#: The standard deviation of normal noise per unit of median absolute deviation.
MAD_TO_SIGMA = 1.4826
RESAMPLES = 2000
SEED = 20240601
#: Fewer steps than this in either run: the noise estimate is rough, and the message says so.
FEW_STEPS = 5
#: (lowest probability, words), checked in order.
_WORDS = ((0.99, "almost certain"), (0.9, "very likely"), (0.7, "likely"),
          (0.3, "uncertain"), (0.1, "unlikely"), (0.0, "very unlikely"))
_CHUNK = 250  # resamples per batch, to bound memory on runs with thousands of steps
_MAX_VALUES = 4_000_000  # values held per batch (ranks x steps x resamples)


class SlowdownOdds(Record):
    """Change in median step time (percent of BASE) and how likely it exceeds a limit."""

    json_derived = (Derived("interval_90_pct", "change_pct"),
                    Derived("confidence", "probability_over_limit", attr="words"),
                    Derived("resamples", "confidence"), Derived("rough", "new_steps"))
    json_internal = frozenset({"low_pct", "high_pct"})

    change_pct: float
    low_pct: float  # 90% interval
    high_pct: float
    #: Share of resamples slower than the limit.
    probability: float = field(name="probability_over_limit")
    base_steps: int  # steps resampled (a step of several ranks counts once)
    new_steps: int

    @property
    def judged(self) -> bool:
        """Whether both runs have the two steps it takes to see any step-to-step noise."""
        return min(self.base_steps, self.new_steps) >= 2

    @property
    def words(self) -> str:
        if not self.judged:
            return "unknown"
        return likelihood(self.probability)

    @property
    def rough(self) -> bool:
        return min(self.base_steps, self.new_steps) < FEW_STEPS

    @property
    def interval_90_pct(self) -> list[float]:
        return [self.low_pct, self.high_pct]

    @property
    def resamples(self) -> int:
        """Bootstrap resamples drawn (``RESAMPLES``)."""
        return RESAMPLES


def likelihood(probability: float) -> str:
    """The words for a probability ("very likely" from 90%)."""
    return next(w for p, w in _WORDS if probability >= p)


def step_clusters(ms: Sequence[float], steps: Sequence[object] | None = None) -> np.ndarray:
    """The times as rows of one step each (NaN-padded): ``steps[i]`` is the step number of
    ``ms[i]``, and times of the same number (its ranks) share a row. None: a row per time."""
    values = np.asarray(ms, float)
    if steps is None or len(set(steps)) == len(values):
        return values[:, None]
    rows: dict[object, list[float]] = {}
    for value, step in zip(values.tolist(), steps, strict=True):
        rows.setdefault(step, []).append(value)
    out = np.full((len(rows), max(len(r) for r in rows.values())), np.nan)
    for i, row in enumerate(rows.values()):
        out[i, :len(row)] = row
    return out


def _median_of_resamples(rng: np.random.Generator, clusters: np.ndarray, n: int) -> np.ndarray:
    picked = clusters[rng.integers(0, len(clusters), (n, len(clusters)))].reshape(n, -1)
    return np.median(picked, axis=1) if clusters.shape[1] == 1 else np.nanmedian(picked, axis=1)


def slowdown_odds(base_ms: Sequence[float], new_ms: Sequence[float], limit_pct: float,
                  base_steps: Sequence[object] | None = None,
                  new_steps: Sequence[object] | None = None) -> SlowdownOdds | None:
    """The bootstrap for per-step times of both runs (``*_steps``: each time's step number,
    see ``step_clusters``); None when either run has no step."""
    if not len(base_ms) or not len(new_ms):
        return None
    base, new = step_clusters(base_ms, base_steps), step_clusters(new_ms, new_steps)
    base_median, new_median = float(np.nanmedian(base)), float(np.nanmedian(new))
    if base_median <= 0:
        return None
    change = (new_median / base_median - 1.0) * 100.0
    rng = np.random.default_rng(SEED)
    chunk = max(1, min(_CHUNK, _MAX_VALUES // max(base.size, new.size)))
    samples = []
    for start in range(0, RESAMPLES, chunk):
        n = min(chunk, RESAMPLES - start)
        b = _median_of_resamples(rng, base, n)
        w = _median_of_resamples(rng, new, n)
        samples.append((w / b - 1.0) * 100.0)
    boot = np.concatenate(samples)
    low, high = np.percentile(boot, [5, 95])
    return SlowdownOdds(
        change_pct=float(change), low_pct=float(low), high_pct=float(high),
        probability=float(np.mean(boot > limit_pct)), base_steps=len(base), new_steps=len(new),
    )


# -- run-to-run noise -------------------------------------------------------------------------

#: The chance that a run of a steady series falls outside the band (both sides together).
FALSE_ALARM = 0.001
#: Differences of successive runs needed before any band is given (five runs of one level).
MIN_DIFFERENCES = 4


def noise_band_pct(levels: list[list[float]], baseline_runs: int) -> float | None:
    """The band, in percent, for a run against the median of ``baseline_runs`` runs, from the
    medians of each level (lists of successive runs); None while there are too few."""
    diffs = [np.diff(m) / np.median(m) for m in map(np.asarray, levels) if len(m) >= 2]
    d = np.concatenate(diffs) if diffs else np.empty(0)
    if len(d) < MIN_DIFFERENCES:
        return None
    sigma = math.sqrt(float(np.mean(d**2)) / 2.0)  # a difference has twice a run's variance
    spread = math.sqrt(1.0 + math.pi / 2.0 / baseline_runs)  # the baseline's median varies too
    return t_quantile(1.0 - FALSE_ALARM / 2.0, len(d)) * sigma * spread * 100.0


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile, from the normal one by the Cornish-Fisher expansion (within 3% of
    the exact value from 4 degrees of freedom on, at the tails used here)."""
    from statistics import NormalDist  # with random and fractions: 5 ms of import

    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


def robust_sigma(values: Sequence[float] | np.ndarray, median: float | None = None) -> float:
    """``MAD_TO_SIGMA`` x the median absolute deviation of ``values`` from ``median`` (default:
    their median): the standard deviation of normal noise, which a few outliers cannot inflate."""
    v = np.asarray(values, dtype=np.float64)
    centre = float(np.median(v)) if median is None else median
    return MAD_TO_SIGMA * float(np.median(np.abs(v - centre)))
