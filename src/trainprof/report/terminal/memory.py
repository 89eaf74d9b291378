"""Terminal view of the memory section."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.sections.memory import Memory
from trainprof.report.quantities import (
    add_name_column,
    add_number_columns,
    clip,
    compact_table,
    name_cell,
    pct,
    size,
)

#: Allocating ops named per device.
SHOWN_OPS = 4


def render_memory(result: Memory) -> Group | None:
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
