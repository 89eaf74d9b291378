"""The pipeline section's renderers (a job section): each stage's compute and waits."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.parallelism import pipeline_table
from trainprof.report.markdown.parallelism import parallelism_md
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.parallelism import render_pipeline


def html(result: Any, ctx: ViewContext) -> list[HtmlBlock]:
    rows = pipeline_table(result)
    return [HtmlBlock("Pipeline stages", [rows])] if rows else []


VIEW = SectionView("pipeline", "job", text=lambda result, ctx: render_pipeline(result),
                   html=html, markdown=lambda result, ctx: parallelism_md(None, result),
                   markdown_heading="Parallelism")
