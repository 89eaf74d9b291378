"""Terminal views of the operator and kernel tables (top N; names give way in narrow terminals)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from trainprof.analysis.options import DEFAULT_TOP
from trainprof.analysis.sections.kernels import KernelStats
from trainprof.analysis.sections.operators import OperatorStats
from trainprof.formatting import counted, ms_from_us
from trainprof.report.labels import SORT_LABELS, TENSOR_CORE_OF_ALL
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
from trainprof.trace.model import split_frame

#: The widest the name columns get (in a wide terminal).
OP_WIDTH = 46
KERNEL_WIDTH = 40
LAUNCHER_WIDTH = 24
#: Call sites listed under the operator table.
SHOWN_SITES = 3


_ms = ms_from_us


def render_operators(result: OperatorStats, top: int = DEFAULT_TOP) -> ByWidth | None:
    """The ``top`` operators' table."""
    if not result.rows:
        return None
    return ByWidth(lambda width: _operators(result, width, top))


#: Room the operator table's number columns take (calls and four times, with padding).
_OP_NUMBERS_WIDTH = 50


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


def file_line(frame: str) -> str:
    """``path/to/train.py(42): step`` as ``train.py:42 step``."""
    parts = split_frame(frame)
    if parts is None:
        return frame
    path, line, function = parts
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{base}:{line} {function}"


def render_kernels(result: KernelStats, top: int = DEFAULT_TOP) -> ByWidth | None:
    """The ``top`` kernels' table."""
    if not result.rows:
        return None
    return ByWidth(lambda width: _kernels(result, width, top))


#: Below this width the launching op goes under the kernel's name, not in a column.
KERNEL_LAUNCHER_COLUMN_FROM = 110


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
