"""The collectives section's renderers: each collective's bus bandwidth against the link."""

from __future__ import annotations

from trainprof.analysis.roofline.collectives import Collectives
from trainprof.formatting import number
from trainprof.report.html.roofline import collectives_table
from trainprof.report.markdown.text import md_text, table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.roofline import render_collectives


def html(result: Collectives | None, ctx: ViewContext) -> list[HtmlBlock]:
    rows = collectives_table(result)
    return [HtmlBlock("Collectives' bus bandwidth", [rows])] if rows else []


def markdown(coll: Collectives | None, ctx: ViewContext) -> str:
    if coll is None or not coll.rows:
        return ""
    rows = [[md_text(c.type), number(c.bytes / 1e6, 2), number(c.group_size, 0),
             number(c.count, 0), number(c.busbw_gb_s, 1), number(c.pct_of_peak, 1, "%")]
            for c in coll.rows[:ctx.rows]]
    return "\n".join(["**Collectives' bus bandwidth**", "",
                      table(["collective", "MB", "ranks", "calls", "busbw GB/s", "% of link"],
                            rows)])


VIEW = SectionView("collectives", text=lambda result, ctx: render_collectives(result),
                   html=html, markdown=markdown, markdown_heading="How far from the hardware")
