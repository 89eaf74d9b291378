"""The collectives section's renderers: each collective's bus bandwidth against the link."""

from __future__ import annotations

from rich.table import Table as TextTable

from trainprof.analysis.roofline.collectives import Collectives
from trainprof.formatting import number
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.markdown.text import md_text, table
from trainprof.report.quantities import (
    add_name_column,
    add_number_columns,
    compact_table,
    duration,
    size,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext


def text(result: Collectives, ctx: ViewContext) -> TextTable | None:
    if not result.rows:
        return None
    t = compact_table(f"Collectives' bus bandwidth ({result.device or 'unknown device'}; "
                      f"{result.unsized} without sizes)")
    add_name_column(t, "collective", 16)
    add_number_columns(t, "size", "ranks", "calls", "time", "algbw GB/s", "busbw GB/s",
                       "% of peak")
    for r in result.rows[:10]:
        peak = "n/a" if r.pct_of_peak is None else f"{r.pct_of_peak:.1f}% of {r.peak_gb_s:g}"
        t.add_row(r.type, size(r.bytes), f"{r.group_size}", f"{r.count}", duration(r.time_us),
                  f"{r.algbw_gb_s:.1f}", f"{r.busbw_gb_s:.1f}", peak)
    return t


def collectives_table(coll: Collectives | None) -> Table | None:
    rows = coll.rows if coll is not None else []
    if not rows:
        return None
    cols = [Column("collective", numeric=False), Column("MB"), Column("ranks"),
            Column("calls"), Column("ms"), Column("algbw GB/s"),
            Column("busbw GB/s", title="nccl-tests' bus bandwidth"),
            Column("% of link", title="of the per-direction link (or NIC) peak")]
    out = Table(cols)
    for r in rows:
        out.rows.append([text_cell(r.type), num(r.bytes / 1e6, 2), num(r.group_size, 0),
                           num(r.count, 0), num(r.time_us / 1000, 2), num(r.algbw_gb_s, 1),
                           num(r.busbw_gb_s, 1), num(r.pct_of_peak, 1, "%")])
    return out


def html(result: Collectives | None, ctx: ViewContext) -> list[HtmlBlock]:
    rows = collectives_table(result)
    return [HtmlBlock("Collectives' bus bandwidth", [rows])] if rows else []


def markdown(coll: Collectives | None, ctx: ViewContext) -> str:
    if coll is None or not coll.rows:
        return ""
    rows = [[md_text(c.type), number(c.bytes / 1e6, 2), number(c.group_size, 0),
             number(c.count, 0), number(c.busbw_gb_s, 1), number(c.pct_of_peak, 1, "%")]
            for c in coll.rows[:ctx.rows]]
    return "\n".join(["**Collectives' bus bandwidth**", "",
                      table(["collective", "MB", "ranks", "calls", "busbw GB/s", "% of link"],
                            rows)])


VIEW = SectionView("collectives", text=text, html=html, markdown=markdown,
                   markdown_heading="How far from the hardware")
