"""The copies section's renderers (host-device copies): per kind, how many a step, their size,
bandwidth and exposed time."""

from __future__ import annotations

from rich.table import Table

from trainprof.analysis.sections.copies import Copies
from trainprof.report.quantities import compact_table, pct, size
from trainprof.report.sections.view import SectionView, ViewContext


def text(result: Copies, ctx: ViewContext) -> Table | None:
    if not result.rows:
        return None
    t = compact_table(f"Copies (exposed: {pct(result.exposed_pct)} of the window, "
                      f"{result.exposed_ms_per_step:.2f} ms/step)")
    for col in ("kind", "per step", "size/step", "GB/s", "time", "exposed", "pageable/pinned"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for row in result.rows:
        bw = row.bandwidth_gbps
        host = (f"{row.pageable_count}/{row.pinned_count}"
                if row.pageable_count or row.pinned_count else "")
        t.add_row(row.kind, f"{row.count_per_step:.1f}", size(row.bytes_per_step),
                  "n/a" if bw is None else f"{bw:.1f}", pct(row.time_pct, 2),
                  pct(row.exposed_pct, 2), host)
    return t


VIEW = SectionView("copies", text=text)
