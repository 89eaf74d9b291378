"""The HTML report's memory curves: one line chart per device, the peak marked, in a unit that
suits the curve (MB, or kB and bytes for the tiny host curves some traces hold)."""

from __future__ import annotations

from trainprof.analysis.sections.memory import DeviceMemory, Memory
from trainprof.report.html import svg
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import fmt

_MB = 1e6


def memory_unit(top_bytes: float) -> tuple[float, str]:
    """(bytes per unit, unit) for a curve whose largest value is ``top_bytes``."""
    for size, unit in ((_MB, "MB"), (1e3, "kB")):
        if top_bytes >= size:
            return size, unit
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
        size, unit = memory_unit(top)
        lines = [svg.Line(svg.Series("allocated" + (" (above the trace start)" if relative else ""),
                                     "#4e79a7"), [(v or 0.0) / size for v in curve.allocated])]
        if curve.reserved:
            lines.append(svg.Line(svg.Series("reserved", "#f28e2b"),
                                  [(v or 0.0) / size for v in curve.reserved]))
        peak = None
        if peak_bytes is not None and d.peak_ms is not None:
            where = f" in step {d.peak_step}" if d.peak_step is not None else ""
            peak = (d.peak_ms, peak_bytes / size, f"peak {peak_bytes / size:,.0f} {unit}{where}")
        chart = svg.line_chart(xs, lines, "ms from the start of the step window", unit,
                               f"Memory of {d.device}", peak)
        out.append(Chart(chart, svg.legend([ln.series for ln in lines]),
                         _caption(d, fmt((peak_bytes or 0) / size, 0) + f" {unit}")))
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
