"""The rank table's renderers (a job section): how the ranks spread. The table itself is the
reports' overview of a job (report/html/view.py, report/markdown/report.py)."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.spread import spread_charts, spread_table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    rows = spread_table(result)
    if rows is None:
        return []
    return [HtmlBlock("How the ranks spread", [rows, *spread_charts(result)])]


VIEW = SectionView("rank_table", "job", html=html)
