"""How far one run's median step may stray from its baseline by run-to-run noise alone.

The run-to-run standard deviation comes from successive runs within a level (the differences of
neighbouring medians, in percent of their level: blind to a slow drift, and never across a
flagged change or a change of setup). It is estimated from a few runs, so the band uses
Student's t quantile for that many differences rather than the normal one: with few runs the
band is wide, and it narrows as the history grows. Runs are assumed independent and roughly
normal around their level.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

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
    z = NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))
