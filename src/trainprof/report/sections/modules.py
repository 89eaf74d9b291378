"""The modules section's renderers: time per nn.Module, as a tree."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.modules import modules_view
from trainprof.report.markdown.modules import modules_md
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.modules import render_modules


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    view = modules_view(result)
    return [HtmlBlock(modules=view)] if view is not None else []


def markdown(result: Any, ctx: ViewContext) -> str:
    return modules_md(result) if ctx.modules and result is not None else ""


VIEW = SectionView("modules", text=lambda result, ctx: render_modules(result, ctx.modules), html=html,
                   markdown=markdown, markdown_heading="Time per module")
