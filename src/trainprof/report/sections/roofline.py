"""The roofline section's renderers: each op class and costly shape against the device's roof
(docs/roofline.md). The HTML page draws them on a log-log chart (one point per op and shape,
under the device's ceilings); every trace string is escaped here or by the template."""

from __future__ import annotations

import math

from markupsafe import Markup, escape
from rich.console import Group
from rich.table import Table as TextTable

from trainprof.analysis.roofline.section import Roofline, RooflineRow
from trainprof.formatting import counted, number
from trainprof.report.html import svg
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.markdown.text import md_text, table
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    pct,
    two_line_name,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: Shape rows shown under the classes.
SHAPE_ROWS = 8
#: Terminal width from which every figure gets its own column.
WIDE = 120
NAME_WIDTH = 40
#: Our colours per op class (never from a trace).
CLASS_COLORS = {"gemm": "#4e79a7", "conv_fwd": "#59a14f", "conv_bwd": "#8cd17d",
                "attention_fwd": "#e15759", "attention_bwd": "#ff9d9a", "norm": "#b07aa1",
                "softmax": "#f28e2b", "elementwise": "#9c755f"}
CEILING_COLOR = "#555555"
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 12, 24, 40


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000:.2f}"


def _text_table(title: str, rows: list[tuple[str, str, RooflineRow]], width: int) -> TextTable:
    """One row per (name, detail, figures); at WIDE columns and more the dtype, calls,
    intensity and bound get columns, below it they go on a dim line under the name."""
    wide = width >= WIDE
    t = compact_table(title)
    add_name_column(t, "op", NAME_WIDTH)
    heads = (("dtype", "calls") if wide else ()) + ("ms", "TFLOP/s", "TB/s") + (
        ("FLOP/B", "bound") if wide else ()) + ("% roof", "ms lost")
    add_number_columns(t, *heads)
    for name, detail, r in rows:
        numbers = [_ms(r.time_us), f"{r.achieved_tflops:.1f}", f"{r.achieved_tb_s:.2f}"]
        tail = [pct(r.pct_of_roofline), _ms(r.lost_us)]
        if wide:
            label = f"{name} {detail}".strip()
            t.add_row(label, r.dtype, f"{r.calls}", *numbers, f"{r.intensity:.0f}",
                      r.bound or "n/a", *tail)
        else:
            more = f"{r.dtype}, {counted(r.calls, 'call')}, {r.bound or 'no'}-bound"
            t.add_row(two_line_name(name, f"{detail} · {more}" if detail else more, wrap=True),
                      *numbers, *tail)
    return t


def text(result: Roofline, ctx: ViewContext) -> ByWidth | None:
    if not result.classes:
        return None
    where = (f"{result.device.name} ({result.device_source})" if result.device
             else "unknown device: no roofline")

    def build(width: int) -> Group:
        classes = _text_table(f"Roofline per op class, {where}: {pct(result.coverage_pct)} of "
                              "GPU time modelled", [(r.op_class, "", r) for r in result.classes],
                              width)
        shapes = _text_table("Costliest shapes against the roofline",
                             [(r.op.removeprefix("aten::"), r.shape, r)
                              for r in result.shapes[:SHAPE_ROWS]], width)
        return Group(classes, shapes)

    return ByWidth(build)


def _decades(low: float, high: float) -> tuple[int, int]:
    return math.floor(math.log10(low)), math.ceil(math.log10(high))


def roofline_chart(roof: Roofline | None) -> Chart | None:
    """Achieved TFLOP/s against arithmetic intensity, log-log, under the device's roofs."""
    rows = [r for r in (roof.shapes if roof is not None else [])
            if r.intensity > 0 and r.achieved_tflops > 0]
    device = roof.device if roof is not None else None
    if not rows or roof is None or device is None:
        return None
    bandwidth = float(device.hbm_tb_s)
    peaks: dict[str, float] = {c: peak for r in rows for c in (r.ceiling or "").split(",")
                               if c and (peak := device.peak_tflops.get(c))}
    xs = [r.intensity for r in rows] + [p / bandwidth for p in peaks.values()]
    ys = [r.achieved_tflops for r in rows] + list(peaks.values())
    x0, x1 = _decades(min(xs) / 2, max(xs) * 4)
    y0, y1 = _decades(min(ys) / 2, max(ys) * 2)
    w, h = svg.WIDTH - _LEFT - _RIGHT, svg.HEIGHT - _TOP - _BOTTOM

    def x_of(x: float) -> float:
        return _LEFT + w * (math.log10(x) - x0) / (x1 - x0)

    def y_of(y: float) -> float:
        y = min(max(y, 10.0**y0), 10.0**y1)
        return _TOP + h * (1 - (math.log10(y) - y0) / (y1 - y0))

    body = []
    for d in range(y0, y1 + 1):
        y = svg._n(y_of(10.0**d))
        body.append(f'<line class="grid" x1="{_LEFT}" x2="{svg.WIDTH - _RIGHT}" y1="{y}" '
                    f'y2="{y}"/><text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" '
                    f'dominant-baseline="middle">{escape(f"{10.0**d:g}")}</text>')
    for d in range(x0, x1 + 1):
        body.append(f'<text class="tick" x="{svg._n(x_of(10.0**d))}" '
                    f'y="{svg.HEIGHT - _BOTTOM + 14}" text-anchor="middle">'
                    f'{escape(f"{10.0**d:g}")}</text>')
    body.append(f'<text class="axis" x="{_LEFT - 6}" y="{_TOP - 12}" text-anchor="end">'
                "TFLOP/s</text>")
    body.append(f'<text class="axis" x="{svg._n(_LEFT + w / 2)}" y="{svg.HEIGHT - 6}" '
                'text-anchor="middle">FLOP per byte (arithmetic intensity)</text>')
    lo, hi = 10.0**x0, 10.0**x1
    for name, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        ridge = peak / bandwidth
        pts = " ".join(f"{svg._n(x_of(x))},{svg._n(y_of(y))}"
                       for x, y in ((lo, lo * bandwidth), (ridge, peak), (hi, peak)))
        tip = (f"{name} roof: {peak:g} TFLOP/s, {bandwidth:g} TB/s, ridge at "
               f"{ridge:.0f} FLOP/B")
        body.append(f'<polyline fill="none" stroke="{CEILING_COLOR}" stroke-width="1.5" '
                    f'points="{pts}"><title>{escape(tip)}</title></polyline>')
        body.append(f'<text class="tick" x="{svg.WIDTH - _RIGHT - 4}" '
                    f'y="{svg._n(y_of(peak) - 5)}" text-anchor="end">{escape(name)}</text>')
    for r in rows:
        color = CLASS_COLORS.get(r.op_class, "#999999")
        of_roof = r.pct_of_roofline
        tip = (f"{r.op} {r.shape} {r.dtype}: {r.achieved_tflops:.2f} TFLOP/s at "
               f"{r.intensity:.1f} FLOP/B" + ("" if of_roof is None else f", {of_roof:.1f}% of "
                                              "roofline") + f", {counted(r.calls, 'call')}")
        body.append(f'<circle cx="{svg._n(x_of(r.intensity))}" '
                    f'cy="{svg._n(y_of(r.achieved_tflops))}" r="4" fill="{color}" '
                    f'fill-opacity="0.8"><title>{escape(tip)}</title></circle>')
    classes = sorted({r.op_class for r in rows})
    legend = svg.legend([svg.Series(c, CLASS_COLORS.get(c, "#999999")) for c in classes]
                        + [svg.Series("device roofs", CEILING_COLOR)])
    caption = (f"{device.name} ({roof.device_source}): one point per op, shape and "
               "dtype; hover for figures.")
    return Chart(Markup(svg._svg(body, "Roofline: achieved TFLOP/s against FLOP per byte")),
                 legend, caption)


def roofline_table(roof: Roofline | None) -> Table | None:
    rows = roof.classes if roof is not None else []
    if not rows:
        return None
    cols = [Column("op class", numeric=False), Column("dtype", numeric=False), Column("calls"),
            Column("ms"), Column("TFLOP/s"), Column("TB/s"), Column("bound", numeric=False),
            Column("% of roofline"), Column("ms lost", title="time beyond the roofline")]
    out = Table(cols)
    for r in rows:
        lost = r.lost_us
        out.rows.append([text_cell(r.op_class), text_cell(r.dtype), num(r.calls, 0),
                         num(r.time_us / 1000, 2), num(r.achieved_tflops, 1),
                         num(r.achieved_tb_s, 2), text_cell(r.bound or "n/a"),
                         num(r.pct_of_roofline, 1, "%"),
                         num(None if lost is None else lost / 1000, 2)])
    return out


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


VIEW = SectionView("roofline", text=text, html=html, markdown=markdown,
                   markdown_heading="How far from the hardware")
