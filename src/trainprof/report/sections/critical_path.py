"""The critical path's renderers: what sets the step time, and the what-if table."""

from __future__ import annotations

from trainprof.analysis.critical_path.result import CriticalPath
from trainprof.formatting import number
from trainprof.report.html.critical_path import path_chart, split_table, what_if_table
from trainprof.report.markdown.text import md_text, table
from trainprof.report.names import short_name as short_kernel_name
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.critical_path import CATEGORY_LABELS, render_critical_path


def html(path: CriticalPath | None, ctx: ViewContext) -> list[HtmlBlock]:
    chart = path_chart(path)
    if chart is None:
        return []
    tables = [t for t in (split_table(path), what_if_table(path)) if t]
    return [HtmlBlock("Critical path: what sets the step time", [chart, *tables], beside=True)]


def markdown(path: CriticalPath | None, ctx: ViewContext) -> str:
    """The path's split and its what-if table (docs/critical_path.md)."""
    if path is None or not path.step_ms:
        return ""
    split = [[CATEGORY_LABELS.get(k, k), number(v, 1, "%")]
             for k, v in sorted(path.split_pct.items(), key=lambda kv: -kv[1]) if v > 0]
    out = [f"{number(path.step_ms, 2)} ms a step, replayed.", "",
           table(["on the path", "% of step"], split, "lr")]
    items = [[md_text(f"{i.kind}: " + (short_kernel_name(i.name) if i.kind == "kernel"
                                        else i.name)), number(i.on_path_pct, 1, "%"),
              number(i.step_ms_if_zero, 2), number(i.step_ms_if_half, 2),
              number(i.saving_pct_if_zero, 1, "%")] for i in path.items]
    if items:
        out += ["", table(["item", "% of path", "step ms if 0", "if half", "saves ≤"], items,
                          "lrrrr")]
    return "\n".join(out)


VIEW = SectionView("critical_path", text=lambda result, ctx: render_critical_path(result),
                   html=html, markdown=markdown,
                   markdown_heading="What sets the step time: the critical path")
