"""The experts section's renderers (a job section): the all-to-all across expert ranks."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.model_parallel import experts_table
from trainprof.report.markdown.model_parallel import model_parallel_md
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.model_parallel import render_experts


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    rows = experts_table(result)
    return [HtmlBlock("Expert parallelism: all-to-all per rank", [rows])] if rows else []


VIEW = SectionView("experts", "job", text=lambda result, ctx: render_experts(result),
                   html=html, markdown=lambda result, ctx: model_parallel_md(None, result),
                   markdown_heading="Parallelism")
