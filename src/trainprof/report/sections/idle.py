"""The idle section's renderers: the GPU's idle time per device and stream, and its longest idle
gaps with what the host did in them. HTML cells are escaped by the template."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table as TextTable

from trainprof.analysis.sections.idle import IdleTime
from trainprof.report.html.tables import Cell, Column, Table, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.quantities import (
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    pct,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: Gaps shown in the terminal (the JSON has all that were kept).
SHOWN_GAPS = 5
#: Gaps shown on the HTML page.
HTML_GAPS = 10
#: The widest the "CPU meanwhile" column gets (in a wide terminal).
HOST_WIDTH = 52


def text(result: IdleTime, ctx: ViewContext) -> Group | None:
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
    parts: list[TextTable] = [t]
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


def idle_gaps_table(idle: IdleTime, rows: int = HTML_GAPS) -> Table | None:
    gaps = idle.longest
    if not gaps:
        return None
    cols = [Column("step"), Column("device"),
            Column("at ms", title="from the start of the step window"),
            Column("gap µs"), Column("kind", numeric=False),
            Column("what the CPU was doing (top-level ops, µs)", numeric=False)]
    out = Table(cols)
    for g in gaps[:rows]:
        host = [(h.overlap_us, h.name) for h in g.host]
        if g.no_host_op_us >= 1:
            host.append((g.no_host_op_us, "(no op recorded)"))
        meanwhile = ", ".join(f"{n} {us:,.0f}" for us, n in sorted(host, reverse=True))
        out.rows.append([
            num(g.step, 0) if g.step is not None else Cell("", -1),
            text_cell(g.device), num(g.start_ms, 1), num(g.duration_us, 0),
            text_cell(g.category.replace("_", " ")), text_cell(meanwhile),
        ])
    return out


def html(result: IdleTime | None, ctx: ViewContext) -> list[HtmlBlock]:
    table = idle_gaps_table(result) if result is not None else None
    return [HtmlBlock("Longest GPU idle gaps", [table])] if table else []


VIEW = SectionView("idle", text=text, html=html)
