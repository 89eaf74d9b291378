"""The idle section's renderers: the GPU's longest idle gaps and what the host did in them."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.tables import idle_gaps_table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.idle import render_idle


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    table = idle_gaps_table(result) if result is not None else None
    return [HtmlBlock("Longest GPU idle gaps", [table])] if table else []


VIEW = SectionView("idle", text=lambda result, ctx: render_idle(result), html=html)
