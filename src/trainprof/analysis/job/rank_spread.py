"""How a job's ranks spread: per-rank step time, idle share and communication as a
distribution (quantiles and a histogram), with the ranks far from the rest named.

Read at a glance where a table of 1,024 rows cannot be. Computed from the per-rank table's
rows (analysis/job/rank_table.py); in the JSON result under ``job.rank_table.spread``.
docs/distributed.md ("Many ranks").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainprof.stats import robust_sigma
from trainprof.structs import Record

if TYPE_CHECKING:
    from trainprof.analysis.job.rank_table import RankRow

#: Bars of a figure's histogram, equal widths from its smallest value to its largest.
HISTOGRAM_BINS = 12
#: A rank is an outlier when it lies more than this many robust standard deviations from the
#: median (1.4826 × the median absolute deviation: the standard deviation of normal noise,
#: which one slow rank cannot inflate); 3 flags about 3 ranks in 1,000 of pure noise.
OUTLIER_SIGMAS = 3.0
#: ... and more than this share of the median from it: 2% of a step is within run-to-run
#: noise, so ranks that all but agree (a MAD near 0) are not called outliers.
OUTLIER_MIN_SHARE = 0.02
#: Outliers named per figure, the farthest from the median first.
NAMED_OUTLIERS = 8

#: The figures spread: (key, the row's field, label, unit).
FIGURES = (("step_ms", "step_ms", "step time", "ms"),
           ("idle_pct", "idle_pct", "idle", "%"),
           ("comm_ms", "comm_ms", "communication", "ms"))


class Outlier(Record):
    rank: int
    value: float
    side: str  # "high" or "low"


class Spread(Record):
    label: str
    unit: str
    ranks: int  # ranks with a value
    min: float
    p10: float
    median: float
    p90: float
    max: float
    edges: list[float]  # HISTOGRAM_BINS + 1 bin edges (one bin when every value is equal)
    counts: list[int]  # ranks per bin
    outliers: list[Outlier]  # named, the farthest first
    outlier_count: int  # all of them, named or not


def rank_spreads(rows: list[RankRow]) -> dict[str, Spread]:
    """Each figure's spread over the ranks that have it (none for fewer than two ranks)."""
    out: dict[str, Spread] = {}
    for key, field, label, unit in FIGURES:
        pairs = [(r.rank, getattr(r, field)) for r in rows
                 if getattr(r, field) is not None and (r.steps or field != "step_ms")]
        if len(pairs) >= 2:
            out[key] = spread(label, unit, [p[0] for p in pairs], [p[1] for p in pairs])
    return out


def spread(label: str, unit: str, ranks: list[int], values: list[float]) -> Spread:
    """The distribution of ``values`` (one per rank in ``ranks``)."""
    v = np.asarray(values, dtype=np.float64)
    p10, median, p90 = (float(x) for x in np.percentile(v, [10, 50, 90]))
    low, high = float(v.min()), float(v.max())
    edges = np.linspace(low, high, HISTOGRAM_BINS + 1)
    if np.all(np.diff(edges) > 0):  # else the values differ by less than floats can split
        counts, edges = np.histogram(v, bins=edges)
    else:
        counts, edges = np.array([len(v)]), np.array([low, high])
    scale = max(robust_sigma(v, median) * OUTLIER_SIGMAS,
                OUTLIER_MIN_SHARE * abs(median))
    far = np.flatnonzero(np.abs(v - median) > scale) if scale > 0 else np.array([], int)
    far = far[np.argsort(-np.abs(v[far] - median), kind="stable")]
    outliers = [Outlier(rank=ranks[i], value=float(v[i]), side="high" if v[i] > median else "low")
                for i in far[:NAMED_OUTLIERS]]
    return Spread(label=label, unit=unit, ranks=len(v), min=low, p10=p10, median=median,
                  p90=p90, max=high, edges=[float(e) for e in edges],
                  counts=[int(c) for c in counts], outliers=outliers, outlier_count=len(far))
