"""The communication section's renderers: collectives per type, busy and exposed, and the share
hidden by compute. HTML cells are escaped by the template."""

from __future__ import annotations

from rich.table import Table as TextTable

from trainprof.analysis.sections.communication import Communication
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.quantities import compact_table, ms, pct, size
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext


def text(result: Communication, ctx: ViewContext) -> TextTable | None:
    if not result.types:
        return None
    where = "kernels" if result.source == "kernels" else "host ranges"
    t = compact_table(f"Communication ({result.backend or 'backend unknown'}, from {where}; "
                      f"hidden by compute {pct(result.overlap_pct)})")
    for col in ("collective", "per step", "size/step", "ms/step", "exposed ms", "overlap"):
        t.add_column(col, justify="left" if col == "collective" else "right")
    n = max(result.steps, 1)
    for row in result.types:
        t.add_row(row.type, f"{row.count_per_step:.1f}",
                  size(None if row.bytes is None else row.bytes / n),
                  ms(row.busy_ms_per_step), ms(row.exposed_us / n / 1e3), pct(row.overlap_pct))
    return t


def communication_table(comm: Communication) -> Table | None:
    """Per collective type: calls and busy ms per step, the share hidden by compute."""
    if not comm.count or not comm.types:
        return None
    cols = [Column("collective", numeric=False), Column("per step"), Column("ms/step"),
            Column("hidden by compute", title="share of its time overlapped with compute")]
    out = Table(cols)
    for t in comm.types:
        out.rows.append([text_cell(t.type), num(t.count_per_step, 1),
                         num(t.busy_ms_per_step, 2), num(t.overlap_pct, 0, "%")])
    return out


def html(result: Communication | None, ctx: ViewContext) -> list[HtmlBlock]:
    table = communication_table(result) if result is not None else None
    return [HtmlBlock("Communication", [table])] if table else []


VIEW = SectionView("communication", text=text, html=html)
