"""The collective_ranks section's renderers (a job section): each rank's bus bandwidth."""

from __future__ import annotations

from trainprof.analysis.job.collective_ranks import CollectiveRanks
from trainprof.formatting import number
from trainprof.report.html.roofline import collective_ranks_table
from trainprof.report.markdown.text import table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.roofline import render_collective_ranks

#: Ranks listed in the Markdown comment, the slowest link first.
MARKDOWN_ROWS = 16


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


VIEW = SectionView("collective_ranks", "job",
                   text=lambda result, ctx: render_collective_ranks(result), html=html,
                   markdown=markdown, markdown_heading="Collectives' bus bandwidth per rank")
