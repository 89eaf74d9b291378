"""Terminal view of the idle-time section."""

from __future__ import annotations

from rich.console import Group

from trainprof.analysis.sections.idle import IdleTime
from trainprof.report.quantities import (
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    pct,
)

#: Gaps shown in the terminal (the JSON has all that were kept).
SHOWN_GAPS = 5
#: The widest the "CPU meanwhile" column gets (in a wide terminal).
HOST_WIDTH = 52


def render_idle(result: IdleTime) -> Group | None:
    if not result.devices:
        return None
    t = compact_table(f"GPU idle time (gaps under {result.kernel_wait_max_us:.0f} µs after a "
                    "timely launch are kernel wait)")
    t.add_column("device/stream", no_wrap=True)
    add_number_columns(t, "events", "idle ms", "of span", "host wait", "kernel wait", "other")
    for row in (*result.devices, *result.streams):
        label = f"GPU {row.device}" if row.stream is None else f"  stream {row.stream}"
        t.add_row(label, str(row.events), f"{row.idle_us / 1000:.2f}",
                  pct(row.idle_pct_of_span), pct(row.host_wait_pct_of_idle),
                  pct(row.kernel_wait_pct_of_idle), pct(row.other_pct_of_idle))
    parts: list = [t]
    if result.longest:
        g = compact_table("Longest GPU idle gaps, and what the CPU was doing")
        add_number_columns(g, "step", "at ms", "gap µs")
        g.add_column("kind", no_wrap=True)
        add_name_column(g, "CPU meanwhile (top-level ops, µs)", HOST_WIDTH)
        for gap in result.longest[:SHOWN_GAPS]:
            items = [(h.overlap_us, h.name) for h in gap.host]
            if gap.no_host_op_us >= 1:
                items.append((gap.no_host_op_us, "(no op recorded)"))
            host = ", ".join(f"{name} {us:.0f}" for us, name in sorted(items, reverse=True))
            g.add_row("" if gap.step is None else str(gap.step), f"{gap.start_ms:.1f}",
                      f"{gap.duration_us:.0f}", gap.category.replace("_", " "), name_cell(host, HOST_WIDTH))
        parts.append(g)
    return Group(*parts)
