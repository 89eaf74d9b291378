"""The roofline section's renderers: each op class and costly shape against the device's roof."""

from __future__ import annotations

from trainprof.analysis.roofline.section import Roofline
from trainprof.formatting import number
from trainprof.report.html.roofline import roofline_chart, roofline_table
from trainprof.report.markdown.text import md_text, table
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext
from trainprof.report.terminal.roofline import render_roofline


def html(result: Roofline | None, ctx: ViewContext) -> list[HtmlBlock]:
    rows = roofline_table(result)
    if rows is None:
        return []
    chart = roofline_chart(result)
    return [HtmlBlock("How far from the hardware", [*([chart] if chart else []), rows])]


def markdown(roof: Roofline | None, ctx: ViewContext) -> str:
    if roof is None or not roof.classes:
        return ""
    device = roof.device.name if roof.device is not None else "unknown device"
    head = ["op class / shape", "dtype", "calls", "ms", "TFLOP/s", "TB/s", "bound",
            "% of roofline", "ms lost"]
    rows = [[md_text(f"{x.op} {x.shape}".strip() or x.op_class, None),
             md_text(x.dtype), number(x.calls, 0), number(x.time_us / 1000, 2),
             number(x.achieved_tflops, 1), number(x.achieved_tb_s, 2),
             md_text(x.bound or "n/a"), number(x.pct_of_roofline, 1, "%"),
             number(None if x.lost_us is None else x.lost_us / 1000, 2)]
            for x in [*roof.classes, *roof.shapes[:ctx.rows]]]
    return "\n".join([f"**Roofline** on {md_text(device or 'unknown device')} "
                      f"({number(roof.coverage_pct, 0, '%')} of GPU time modelled)", "",
                      table(head, rows)])


VIEW = SectionView("roofline", text=lambda result, ctx: render_roofline(result), html=html,
                   markdown=markdown, markdown_heading="How far from the hardware")
