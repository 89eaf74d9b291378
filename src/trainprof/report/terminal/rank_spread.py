"""The spread of a job's ranks in words and bars (analysis/job/rank_spread.py): for each figure its
quantiles, a histogram in one line of block characters, and the outlying ranks by name.

Shared by the text report and the Markdown comment; the HTML page draws the histograms as
charts (report/html/view.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainprof.analysis.job.rank_spread import Spread
    from trainprof.analysis.job.rank_table import RankTable

#: Ranks from which the reports show the spread (below, the per-rank table says it all).
SPREAD_MIN_RANKS = 8
#: Heights of a histogram's bars, and a bin with no rank (a dot: blanks vanish in Markdown).
BARS = "▁▂▃▄▅▆▇█"
EMPTY = "·"
SPREAD_HEAD = ["figure", "min", "p10", "median", "p90", "max", "histogram", "outliers"]


def histogram_bars(counts: list[int]) -> str:
    """One character per bin: a dot for none, else a bar as high as its share of the fullest."""
    top = max(counts, default=0)
    if top <= 0:
        return " " * len(counts)
    return "".join(EMPTY if c <= 0 else BARS[max(0, math.ceil(c / top * len(BARS)) - 1)]
                   for c in counts)


def value_text(value: float, unit: str, with_unit: bool = True) -> str:
    """A figure (with its unit): ms with one decimal below 100, percentages whole."""
    if unit == "%":
        return f"{value:.0f}" + "%" * with_unit
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"
    return f"{text} {unit}" if with_unit else text


def outliers_text(spread: Spread) -> str:
    """The outlying ranks, the farthest first: ``rank 7 (130 ms)``; "none" when there are none."""
    named = [f"rank {o.rank} ({value_text(o.value, spread.unit)})" for o in spread.outliers]
    more = spread.outlier_count - len(named)
    return (", ".join(named) + (f" and {more} more" if more > 0 else "")) or "none"


def spread_rows(spreads: dict[str, Spread]) -> list[list[str]]:
    """One row per figure under ``SPREAD_HEAD``."""
    rows = []
    for s in spreads.values():
        rows.append([f"{s.label} {s.unit}", *(value_text(v, s.unit, False)
                                              for v in (s.min, s.p10, s.median, s.p90, s.max)),
                     histogram_bars(s.counts), outliers_text(s)])
    return rows


def spread_shown(rank_table: RankTable) -> bool:
    """Whether a report shows the spread of this per-rank table."""
    return len(rank_table.rows) >= SPREAD_MIN_RANKS and bool(rank_table.spread)
