"""The memory section's renderers: each device's allocated memory over the steps."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.memory import memory_charts
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.memory import render_memory


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    charts = memory_charts(result)
    return [HtmlBlock("Memory", list(charts))] if charts else []


VIEW = SectionView("memory", text=lambda result, ctx: render_memory(result), html=html)
