"""The parallelism section's renderers: the kinds a rank shows, its FSDP and tensor-parallel
layers (docs/parallelism.md)."""

from __future__ import annotations

from trainprof.analysis.parallelism.result import Parallelism
from trainprof.report.html.model_parallel import tensor_layers_table
from trainprof.report.html.parallelism import fsdp_layers_table, parallelism_table
from trainprof.report.markdown.model_parallel import model_parallel_md
from trainprof.report.markdown.parallelism import parallelism_md
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.parallelism import render_parallelism


def html(result: Parallelism | None, ctx: ViewContext) -> list[HtmlBlock]:
    kinds = parallelism_table(result)
    tables = [t for t in (kinds, fsdp_layers_table(result), tensor_layers_table(result)) if t]
    return [HtmlBlock("Parallelism" if kinds else None, list(tables))] if tables else []


def markdown(result: Parallelism | None, ctx: ViewContext) -> str:
    return "\n\n".join(x for x in (parallelism_md(result, None),
                                    model_parallel_md(result, None)) if x)


VIEW = SectionView("parallelism", text=lambda result, ctx: render_parallelism(result),
                   html=html, markdown=markdown, markdown_heading="Parallelism")
