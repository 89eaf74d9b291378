"""How sure a slowdown is, given the step-to-step noise of both runs: a bootstrap of the
change in median step time.

Each run's per-step times are resampled with replacement (``RESAMPLES`` times, a fixed seed so
the answer is reproducible); the change in median is computed for each pair of resamples. The
share of resamples in which NEW is slower than BASE by more than the limit is the confidence,
and the 5th-95th percentiles are the 90% interval. Steps are treated as independent (steps of
different ranks of one job are not, so a multi-rank interval is somewhat too narrow).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
SEED = 20240601
#: Fewer steps than this in either run: the noise estimate is rough, and the message says so.
FEW_STEPS = 5
#: (lowest probability, words), checked in order.
_WORDS = ((0.99, "almost certain"), (0.9, "very likely"), (0.7, "likely"),
          (0.3, "uncertain"), (0.1, "unlikely"), (0.0, "very unlikely"))
_CHUNK = 250  # resamples per batch, to bound memory on runs with thousands of steps


@dataclass
class SlowdownOdds:
    """Change in median step time (percent of BASE) and how likely it exceeds a limit."""

    change_pct: float
    low_pct: float  # 90% interval
    high_pct: float
    probability: float  # share of resamples slower than the limit
    base_steps: int
    new_steps: int

    @property
    def words(self) -> str:
        return next(w for p, w in _WORDS if self.probability >= p)

    @property
    def rough(self) -> bool:
        return min(self.base_steps, self.new_steps) < FEW_STEPS

    def to_dict(self) -> dict[str, float | int | str | bool]:
        return {"change_pct": self.change_pct, "interval_90_pct": [self.low_pct, self.high_pct],
                "probability_over_limit": self.probability, "confidence": self.words,
                "resamples": RESAMPLES, "base_steps": self.base_steps,
                "new_steps": self.new_steps, "rough": self.rough}


def slowdown_odds(base_ms: list[float], new_ms: list[float], limit_pct: float
                  ) -> SlowdownOdds | None:
    """The bootstrap for per-step times of both runs; None when either has no step."""
    base, new = np.asarray(base_ms, float), np.asarray(new_ms, float)
    if not len(base) or not len(new) or np.median(base) <= 0:
        return None
    change = (np.median(new) / np.median(base) - 1.0) * 100.0
    rng = np.random.default_rng(SEED)
    samples = []
    for start in range(0, RESAMPLES, _CHUNK):
        n = min(_CHUNK, RESAMPLES - start)
        b = np.median(rng.choice(base, (n, len(base))), axis=1)
        w = np.median(rng.choice(new, (n, len(new))), axis=1)
        samples.append((w / b - 1.0) * 100.0)
    boot = np.concatenate(samples)
    low, high = np.percentile(boot, [5, 95])
    return SlowdownOdds(
        change_pct=float(change), low_pct=float(low), high_pct=float(high),
        probability=float(np.mean(boot > limit_pct)), base_steps=len(base), new_steps=len(new),
    )
