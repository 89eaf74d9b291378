"""The kernels section's renderers: the top kernels and the kernel classes' shares
(docs/kernel_classes.md). In the terminal, names give way in narrow terminals; HTML cells are
escaped by the template; every trace string in the Markdown goes through md_text."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.sections.kernel_shares import KernelClassShares
from trainprof.analysis.sections.kernels import KernelRow, KernelStats
from trainprof.formatting import counted, ms_from_us, number
from trainprof.report.html.tables import DEFAULT_ROWS, Cell, Column, Table, ms_of_us, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.labels import TENSOR_CORE_OF_ALL
from trainprof.report.markdown.text import md_text, table
from trainprof.report.names import distinct_names
from trainprof.report.names import short_name as short_kernel_name
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    name_room,
    pct,
    two_line_name,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: The widest the name columns get (in a wide terminal).
KERNEL_WIDTH = 40
LAUNCHER_WIDTH = 24
#: Below this width the launching op goes under the kernel's name, not in a column.
KERNEL_LAUNCHER_COLUMN_FROM = 110


_ms = ms_from_us


def text(result: KernelStats, ctx: ViewContext) -> ByWidth | None:
    """The top ``ctx.rows`` kernels' table."""
    if not result.rows:
        return None
    return ByWidth(lambda width: _kernels(result, width, ctx.rows))


def _kernels(result: KernelStats, width: int, top: int) -> Group:
    head = Text(f"Kernels by total time ({counted(result.calls, 'call')}, {result.total_us / 1000:.1f} ms; "
                f"Tensor Core kernels {pct(result.tensor_core_pct)} {TENSOR_CORE_OF_ALL})",
                style="italic")
    beside = width >= KERNEL_LAUNCHER_COLUMN_FROM
    t = compact_table()
    add_name_column(t, "kernel" if beside else "kernel (launched by)", KERNEL_WIDTH)
    headers = ("calls", "total ms", "mean µs", "share", "TC", "occ.")
    add_number_columns(t, *headers)
    if beside:
        add_name_column(t, "launched by", LAUNCHER_WIDTH)
    rows = result.top(top)
    numbers = [[str(r.calls), _ms(r.total_us), f"{r.mean_us:.1f}", pct(r.share_pct),
                "yes" if r.tensor_cores else "", pct(r.occupancy_pct, 0)] for r in rows]
    room = name_room(width, [[h, *(n[i] for n in numbers)] for i, h in enumerate(headers)],
                     KERNEL_WIDTH / (KERNEL_WIDTH + LAUNCHER_WIDTH) if beside else 1.0)
    names = distinct_names([r.name for r in rows], room)
    for r, name, cells in zip(rows, names, numbers, strict=True):
        cell = (name_cell(name, KERNEL_WIDTH) if beside or not r.op
                else two_line_name(name, r.op))
        t.add_row(cell, *cells, *([name_cell(r.op or "", LAUNCHER_WIDTH)] if beside else []))
    note = Text("TC: a Tensor Core kernel (by name); occ.: estimated achieved occupancy",
                style="dim")
    classes = kernel_class_line(result)
    return Group(head, *([Text(classes)] if classes else []), t, note)


def kernel_class_line(result: KernelStats) -> str | None:
    """Kernel time per class and the unclassified names, in one sentence (docs/kernel_classes.md)."""
    c = result.classes
    if c is None or not c.total_us:
        return None
    line = (f"Kernel classes: communication {pct(c.class_pct['communication'])}, Tensor Core "
            f"{pct(c.class_pct['tensor_core'])}, other compute {pct(c.class_pct['compute'])}")
    if c.unclassified:
        names = ", ".join(f"{short_kernel_name(u.name)} {_ms(u.total_us)} ms"
                          for u in c.unclassified[:3])
        line += f"; unclassified (counted as compute) {pct(c.unclassified_pct)}: {names}"
    return line


def kernels_table(kernels: KernelStats, rows: int = DEFAULT_ROWS) -> Table:
    cols = [Column("kernel", numeric=False), Column("calls"), Column("total ms"),
            Column("mean µs"), Column("share", title="of all kernel time"),
            Column("occupancy", title="estimated from the launch size"),
            Column("Tensor Cores", numeric=False),
            Column("class", numeric=False, title="docs/kernel_classes.md"),
            Column("launched by", numeric=False)]
    out = Table(cols, caption=_class_caption(kernels.classes))
    shown = kernels.rows[:rows]
    for r, name in zip(shown, distinct_names([r.name for r in shown]), strict=True):
        out.rows.append([
            Cell(name, title=r.name if name != r.name else ""), num(r.calls, 0),
            num(ms_of_us(r.total_us), 2), num(r.mean_us, 1), num(r.share_pct, 1, "%"),
            num(r.occupancy_pct, 0, "%"), text_cell("yes" if r.tensor_cores else "no"),
            text_cell(_class_label(r)), text_cell(r.op or ""),
        ])
    return out


def _class_label(row: KernelRow) -> str:
    label = (row.kernel_class or "compute").replace("_", " ")
    by = row.classified_by
    return f"{label} (unclassified)" if by == "unclassified" else (
        f"{label} (by launch)" if by == "launch" else label)


def _class_caption(classes: KernelClassShares | None) -> str:
    """Kernel time per class, and the unclassified share (docs/kernel_classes.md)."""
    if classes is None or not classes.total_us:
        return ""
    p = classes.class_pct
    return (f"Kernel time: communication {number(p.get('communication'), 1, '%')}, Tensor Core "
            f"{number(p.get('tensor_core'), 1, '%')}, other compute "
            f"{number(p.get('compute'), 1, '%')}"
            f"; unclassified (counted as compute) {number(classes.unclassified_pct, 1, '%')}")


def html(result: KernelStats | None, ctx: ViewContext) -> list[HtmlBlock]:
    if result is None or not result.rows:
        return []
    return [HtmlBlock("Top kernels", [kernels_table(result, ctx.rows)])]


def markdown(kernels: KernelStats | None, ctx: ViewContext) -> str:
    if kernels is None or not kernels.rows:
        return ""
    rows = [[md_text(short_kernel_name(k.name)), number(k.calls, 0), number(k.total_us / 1000, 2),
             number(k.share_pct, 1, "%")] for k in kernels.rows[:ctx.rows]]
    out = ["**Top kernels**", "", table(["kernel", "calls", "total ms", "share"], rows), ""]
    return "\n".join(out + _kernel_classes(kernels.classes)).rstrip()


def _kernel_classes(classes: KernelClassShares | None) -> list[str]:
    """One line: kernel time per class, and the unclassified share (docs/kernel_classes.md)."""
    if classes is None or not classes.total_us:
        return []
    p = classes.class_pct
    return [f"Kernel classes: communication {number(p.get('communication'), 1, '%')}, Tensor "
            f"Core {number(p.get('tensor_core'), 1, '%')}, other compute "
            f"{number(p.get('compute'), 1, '%')}; unclassified "
            f"{number(classes.unclassified_pct, 1, '%')}."]


VIEW = SectionView("kernels", text=text, html=html, markdown=markdown,
                   markdown_heading="Where the time goes: top ops")
