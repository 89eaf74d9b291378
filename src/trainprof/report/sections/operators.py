"""The operators section's renderers: the top operators by self time (in the terminal, names
give way in narrow terminals and the heaviest call sites follow the table). HTML cells are
escaped by the template; every trace string in the Markdown goes through md_text."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.sections.operators import OperatorStats
from trainprof.formatting import counted, ms_from_us, number
from trainprof.report.html.tables import DEFAULT_ROWS, Column, Table, ms_of_us, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.labels import SORT_LABELS
from trainprof.report.markdown.text import md_text, table
from trainprof.report.names import file_line
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    two_line_name,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: The widest the name column gets (in a wide terminal).
OP_WIDTH = 46
#: Call sites listed under the operator table.
SHOWN_SITES = 3
#: Room the operator table's number columns take (calls and four times, with padding).
_OP_NUMBERS_WIDTH = 50


_ms = ms_from_us


def text(result: OperatorStats, ctx: ViewContext) -> ByWidth | None:
    """The top ``ctx.rows`` operators' table."""
    if not result.rows:
        return None
    return ByWidth(lambda width: _operators(result, width, ctx.rows))


def _operators(result: OperatorStats, width: int, top: int) -> Group:
    rows = result.top(top)
    by = "op name and input shapes" if result.by_shape else "op name"
    head = Text(f"Operators by {SORT_LABELS[result.sort_by]} (per {by}, whole trace, ms)",
                style="italic")
    t = compact_table()
    add_name_column(t, "op", OP_WIDTH)
    device = ("dev self", "dev tot") if result.has_device else ()  # none on CPU-only traces
    add_number_columns(t, "calls", "host self", "host tot", *device)
    room = width - _OP_NUMBERS_WIDTH
    for r in rows:
        label = r.name if r.shape is None else f"{r.name} {r.shape}"
        cell = (two_line_name(r.name, r.shape, wrap=True) if r.shape is not None and len(label) > room
                else name_cell(label, OP_WIDTH))
        times = [r.host_self_us, r.host_total_us]
        times += [r.device_self_us, r.device_total_us] if device else []
        t.add_row(cell, str(r.calls), *(_ms(us) for us in times))
    sites = [(r.name, r.call_sites[0]) for r in rows if r.call_sites and r.call_sites[0].source]
    lines = [Text(f"  {name} ← {file_line(site.source or '')} ({counted(site.calls, 'call')})", style="dim",
                  no_wrap=True, overflow="ellipsis") for name, site in sites[:SHOWN_SITES]]
    if lines:
        lines.insert(0, Text("called from (heaviest call site):", style="dim"))
    return Group(head, t, *lines)


def operators_table(ops: OperatorStats, rows: int = DEFAULT_ROWS) -> Table:
    device = ops.has_device
    cols = [Column("operator", numeric=False), Column("calls")]
    if device:
        cols += [Column("device self ms", title="time of the kernels this op launched itself"),
                 Column("device total ms", title="with the kernels of the ops it called")]
    cols += [Column("host self ms", title="host time not spent in ops it called"),
             Column("host total ms")]
    sort_by = ops.sort_by
    out = Table(cols, caption=f"sorted by {SORT_LABELS.get(sort_by, sort_by.replace('_', ' '))}"
                              " (whole trace)")
    for r in ops.rows[:rows]:
        name = r.name + (f" {r.shape}" if r.shape else "")
        cells = [text_cell(name), num(r.calls, 0)]
        if device:
            cells += [num(ms_of_us(r.device_self_us), 2), num(ms_of_us(r.device_total_us), 2)]
        cells += [num(ms_of_us(r.host_self_us), 2), num(ms_of_us(r.host_total_us), 2)]
        out.rows.append(cells)
    return out


def html(result: OperatorStats | None, ctx: ViewContext) -> list[HtmlBlock]:
    if result is None or not result.rows:
        return []
    return [HtmlBlock("Top operators", [operators_table(result, ctx.rows)])]


def markdown(ops: OperatorStats | None, ctx: ViewContext) -> str:
    if ops is None or not ops.rows:
        return ""
    dev = ops.has_device
    head = ["operator", "calls", *(["device self ms"] if dev else []), "host self ms"]
    rows = [[md_text(o.name) if o.shape is None else md_text(f"{o.name} {o.shape}", None),
             number(o.calls, 0), *([number(o.device_self_us / 1000, 2)] if dev else []),
             number(o.host_self_us / 1000, 2)] for o in ops.rows[:ctx.rows]]
    return "\n".join(["**Top operators**", "", table(head, rows)])


VIEW = SectionView("operators", text=text, html=html, markdown=markdown,
                   markdown_heading="Where the time goes: top ops")
