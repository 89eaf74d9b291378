"""The collective_ranks section's renderers (a job section): each rank's bus bandwidth."""

from __future__ import annotations

from rich.table import Table as TextTable

from trainprof.analysis.job.collective_ranks import CollectiveRanks
from trainprof.formatting import number
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.markdown.text import table
from trainprof.report.quantities import compact_table, duration, pct
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: Ranks listed in the Markdown comment, the slowest link first.
MARKDOWN_ROWS = 16


def text(result: CollectiveRanks, ctx: ViewContext) -> TextTable | None:
    """Per rank: its collectives' bus bandwidth, the slowest marked (two ranks or more)."""
    if len(result.rows) < 2:
        return None
    slow = result.slowest
    t = compact_table("Collectives' bus bandwidth per rank")
    for col in ("rank", "calls", "time", "busbw GB/s", "% of peak", ""):
        t.add_column(col, justify="left" if col in ("rank", "") else "right")
    for r in result.rows:
        window = f" w{r.window}" if r.window else ""
        t.add_row(f"{r.rank}{window}", f"{r.calls}", duration(r.time_us), f"{r.busbw_gb_s:.1f}",
                  pct(r.pct_of_peak), "slowest" if r is slow else "")
    return t


def collective_ranks_table(job: CollectiveRanks | None) -> Table | None:
    """Each rank's bus bandwidth (two ranks or more), the slowest marked."""
    rows = job.rows if job is not None else []
    if len(rows) < 2:
        return None
    cols = [Column("rank"), Column("calls"), Column("ms"), Column("busbw GB/s"),
            Column("% of link"), Column("", numeric=False)]
    out = Table(cols)
    for r in rows:
        slowest = job.slowest if job is not None else None
        out.rows.append([num(r.rank, 0), num(r.calls, 0), num(r.time_us / 1000, 2),
                           num(r.busbw_gb_s, 1), num(r.pct_of_peak, 1, "%"),
                           text_cell("slowest" if slowest is not None and r.rank == slowest.rank
                                     else "")])
    return out


def html(result: CollectiveRanks | None, ctx: ViewContext) -> list[HtmlBlock]:
    rows = collective_ranks_table(result)
    return [HtmlBlock("Collectives' bus bandwidth per rank", [rows])] if rows else []


def markdown(ranks: CollectiveRanks | None, ctx: ViewContext) -> str:
    """Each rank's collective bus bandwidth, slowest link first."""
    rows = sorted(ranks.rows if ranks is not None else [], key=lambda r: r.busbw_gb_s)
    if len(rows) < 2:
        return ""
    top = MARKDOWN_ROWS
    body = [[str(r.rank), number(r.calls, 0), number(r.time_us / 1000, 2),
             number(r.busbw_gb_s, 1), number(r.pct_of_peak, 1, "%")] for r in rows[:top]]
    more = f"\n\nThe {top} slowest of {len(rows)}; the JSON result has all." \
        if len(rows) > top else ""
    return table(["rank", "calls", "ms", "busbw GB/s", "% of link"], body, "rrrrr") + more


VIEW = SectionView("collective_ranks", "job", text=text, html=html, markdown=markdown,
                   markdown_heading="Collectives' bus bandwidth per rank")
