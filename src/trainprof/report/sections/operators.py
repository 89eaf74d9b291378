"""The operators section's renderers: the top operators by self time."""

from __future__ import annotations

from trainprof.analysis.sections.operators import OperatorStats
from trainprof.formatting import number
from trainprof.report.html.tables import operators_table
from trainprof.report.markdown.text import md_text, table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.hotspots import render_operators


def html(result: OperatorStats | None, ctx: ViewContext) -> list[HtmlBlock]:
    if result is None or not result.rows:
        return []
    return [HtmlBlock("Top operators", [operators_table(result, ctx.rows)])]


def markdown(ops: OperatorStats | None, ctx: ViewContext) -> str:
    if ops is None or not ops.rows:
        return ""
    dev = ops.has_device
    head = ["operator", "calls", *(["device self ms"] if dev else []), "host self ms"]
    rows = [[md_text(o.name) if o.shape is None else md_text(f"{o.name} {o.shape}", None),
             number(o.calls, 0), *([number(o.device_self_us / 1000, 2)] if dev else []),
             number(o.host_self_us / 1000, 2)] for o in ops.rows[:ctx.rows]]
    return "\n".join(["**Top operators**", "", table(head, rows)])


VIEW = SectionView("operators", text=lambda result, ctx: render_operators(result, ctx.rows), html=html,
                   markdown=markdown, markdown_heading="Where the time goes: top ops")
