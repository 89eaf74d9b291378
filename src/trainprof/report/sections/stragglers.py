"""The stragglers section's renderers (a job section): who waits for whom."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.tables import stragglers_table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.communication import render_stragglers


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    table = stragglers_table(result, ctx.all_ranks)
    return [HtmlBlock("Who waits for whom", [table])] if table else []


VIEW = SectionView("stragglers", "job",
                   text=lambda result, ctx: render_stragglers(result, ctx.all_ranks),
                   html=html)
