"""The memory section's renderers: each device's allocated memory over the steps. The text
report shows the peaks in a table; the HTML page draws one line chart per device, the peak
marked, in a unit that suits the curve (MB, or kB and bytes for the tiny host curves some
traces hold)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.sections.memory import DeviceMemory, Memory
from trainprof.report.html import svg
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import fmt
from trainprof.report.quantities import (
    add_name_column,
    add_number_columns,
    clip,
    compact_table,
    name_cell,
    pct,
    size,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: Allocating ops named per device.
SHOWN_OPS = 4
_MB = 1e6


def text(result: Memory, ctx: ViewContext) -> Group | None:
    if not result.devices:
        return None
    old = not all(d.has_totals for d in result.devices)
    title = "Memory" + (" (+: above the level at the trace start; old-format events)" if old
                        else "")
    t = compact_table(title)
    t.add_column("device", no_wrap=True)
    add_number_columns(t, "peak (of device)", "reserved", "headroom", "MB/step")
    add_name_column(t, "peak at", 40)
    lines = []
    for d in result.devices:
        peak = size(d.peak_allocated) if d.has_totals else "+" + size(d.peak_above_start)
        if d.peak_pct_of_device is not None:
            peak += f" ({pct(d.peak_pct_of_device, 0)})"
        step = "" if d.peak_step is None else f"step {d.peak_step} "
        growth = "" if d.growth_mb_per_step is None else f"{d.growth_mb_per_step + 0.0:+.1f}"
        growth = growth.replace("-0.0", "+0.0")
        if d.leak_suspected:
            growth += " leak?"
        t.add_row(d.device, peak, size(d.reserved_at_peak), size(d.headroom), growth,
                  name_cell(step + (d.peak_op or ""), 40))
        if d.top_ops:
            ops = ", ".join(f"{o.op} {size(o.bytes)}" for o in d.top_ops[:SHOWN_OPS])
            lines.append(Text(clip(f"top allocating ops on {d.device}: {ops}", 96), style="dim"))
    notes = [Text(f"note: {n}", style="yellow") for n in result.notes]
    return Group(t, *lines, *notes)


def html(result: Memory | None, ctx: ViewContext) -> list[HtmlBlock]:
    charts = memory_charts(result)
    return [HtmlBlock("Memory", list(charts))] if charts else []


def memory_unit(top_bytes: float) -> tuple[float, str]:
    """(bytes per unit, unit) for a curve whose largest value is ``top_bytes``."""
    for unit_bytes, unit in ((_MB, "MB"), (1e3, "kB")):
        if top_bytes >= unit_bytes:
            return unit_bytes, unit
    return 1.0, "bytes"


def memory_charts(memory: Memory | None) -> list[Chart]:
    """One line chart per device: allocated (and reserved) memory, the peak marked."""
    out = []
    for d in memory.devices if memory is not None else []:
        curve = d.curve
        xs = curve.ms
        if len(xs) < 2:
            continue
        relative = not d.has_totals
        peak_bytes = d.peak_allocated if not relative else d.peak_above_start
        top = max(abs(v or 0.0) for v in [*curve.allocated, *(curve.reserved or [])])
        unit_bytes, unit = memory_unit(top)
        lines = [svg.Line(svg.Series("allocated" + (" (above the trace start)" if relative else ""),
                                     "#4e79a7"), [(v or 0.0) / unit_bytes for v in curve.allocated])]
        if curve.reserved:
            lines.append(svg.Line(svg.Series("reserved", "#f28e2b"),
                                  [(v or 0.0) / unit_bytes for v in curve.reserved]))
        peak = None
        if peak_bytes is not None and d.peak_ms is not None:
            where = f" in step {d.peak_step}" if d.peak_step is not None else ""
            peak = (d.peak_ms, peak_bytes / unit_bytes,
                    f"peak {peak_bytes / unit_bytes:,.0f} {unit}{where}")
        chart = svg.line_chart(xs, lines, "ms from the start of the step window", unit,
                               f"Memory of {d.device}", peak)
        out.append(Chart(chart, svg.legend([ln.series for ln in lines]),
                         _caption(d, fmt((peak_bytes or 0) / unit_bytes, 0) + f" {unit}")))
    return out


def _caption(d: DeviceMemory, peak: str) -> str:
    caption = f"{d.device}: peak {peak}"
    if d.peak_op:
        caption += f" in {d.peak_op}"
    if d.growth_mb_per_step is not None:
        caption += f"; {d.growth_mb_per_step:+.1f} MB per step"
    if d.leak_suspected:
        caption += " (rising every step: a leak?)"
    return caption


VIEW = SectionView("memory", text=text, html=html)
