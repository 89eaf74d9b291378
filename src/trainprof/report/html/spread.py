"""The HTML report's view of many ranks: a histogram per figure (analysis/job/rank_spread.py), the
quantiles and outliers in a table, and which ranks the side-by-side chart and table keep."""

from __future__ import annotations

from trainprof.analysis.job.rank_table import RankTable, shown_rows
from trainprof.analysis.results import RankAnalysis
from trainprof.report.html import svg, tables
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import Table
from trainprof.report.terminal.rank_spread import SPREAD_HEAD, spread_rows, spread_shown, value_text

#: The histograms' bar colour.
BAR_COLOR = "#4c78a8"


def spread_charts(rank_table: RankTable | None) -> list[Chart]:
    """One histogram of ranks per figure, from 8 ranks on."""
    if rank_table is None or not spread_shown(rank_table):
        return []
    charts = []
    for s in rank_table.spread.values():
        edges = s.edges
        labels = [f"{value_text(lo, s.unit, False)}–{value_text(hi, s.unit, False)}"
                  for lo, hi in zip(edges, edges[1:], strict=False)]
        title = f"{s.label} ({s.unit})"
        chart = svg.stacked_bars(labels, [svg.Series("ranks", BAR_COLOR)],
                                 [[c] for c in s.counts], "ranks", f"Ranks by {title}", title)
        charts.append(Chart(chart, None, f"Ranks by {title}, {s.ranks} in all."))
    return charts


def spread_table(rank_table: RankTable | None) -> Table | None:
    """Each figure's quantiles and its outlying ranks, from 8 ranks on."""
    if rank_table is None or not spread_shown(rank_table):
        return None
    heads = [h for h in SPREAD_HEAD if h != "histogram"]
    table = Table([tables.Column(h, numeric=h not in ("figure", "outliers")) for h in heads],
                  sortable=False)
    for row in spread_rows(rank_table.spread):
        table.rows.append([tables.text(row[0]), *(tables.text(c) for c in row[1:6]),
                           tables.text(row[7])])
    table.caption = ("How the ranks spread: step time is each rank's median step, "
                     "communication is ms per step.")
    return table


def side_by_side(ranks: list[RankAnalysis], rank_table: RankTable | None,
                 straggler: int | None, all_ranks: bool = False
                 ) -> tuple[list[RankAnalysis], str]:
    """The windows of the ranks the per-rank views keep (the slowest, the fastest and the
    straggler when there are many; all with ``--all-ranks``), and a note when some are left out."""
    if rank_table is None:
        return ranks, ""
    kept = {r.rank for r in shown_rows(rank_table.rows, keep=(straggler,), all_ranks=all_ranks)}
    if len(kept) == len(rank_table.rows):
        return ranks, ""
    note = (f"{len(kept)} of {len(rank_table.rows)} ranks side by side: the slowest, the "
            "fastest and any straggler; the histograms below count every rank, and "
            "--all-ranks shows all.")
    return [r for r in ranks if r.rank in kept], note
