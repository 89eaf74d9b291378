"""The communication section's renderers: collectives per type, busy and exposed."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.tables import communication_table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.communication import render_communication


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    table = communication_table(result) if result is not None else None
    return [HtmlBlock("Communication", [table])] if table else []


VIEW = SectionView("communication", text=lambda result, ctx: render_communication(result),
                   html=html)
