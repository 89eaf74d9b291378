"""Tables of the HTML report as plain data (the template escapes every cell).

A ``Table`` is columns and rows of ``Cell``; a cell's ``sort`` value (a number, or the text)
goes into ``data-v`` so the page's small script can sort by it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import field

from trainprof.analysis.job.rank_table import shown_rows
from trainprof.analysis.job.stragglers import Stragglers
from trainprof.analysis.sections.communication import Communication
from trainprof.analysis.sections.idle import IdleTime
from trainprof.analysis.sections.kernel_shares import KernelClassShares
from trainprof.analysis.sections.kernels import KernelRow, KernelStats
from trainprof.analysis.sections.operators import OperatorStats
from trainprof.formatting import number
from trainprof.report.labels import SORT_LABELS
from trainprof.report.names import distinct_names

#: Rows per table unless the caller asks for another number.
DEFAULT_ROWS = 25


class Cell(msgspec.Struct):
    text: str
    sort: float | str | None = None
    title: str = ""  # a tooltip: the whole text when ``text`` is shortened

    @property
    def key(self) -> float | str:
        return self.text if self.sort is None else self.sort


class Column(msgspec.Struct):
    label: str
    numeric: bool = True
    title: str = ""  # a tooltip that says what the column measures


class Table(msgspec.Struct):
    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)
    caption: str = ""
    sortable: bool = True


fmt = number


def num(value: float | None, digits: int = 1, unit: str = "") -> Cell:
    return Cell(fmt(value, digits, unit), -1e300 if value is None else float(value))


def text(value: Any) -> Cell:
    return Cell("" if value is None else str(value))


def operators_table(ops: OperatorStats, rows: int = DEFAULT_ROWS) -> Table:
    device = ops.has_device
    cols = [Column("operator", numeric=False), Column("calls")]
    if device:
        cols += [Column("device self ms", title="time of the kernels this op launched itself"),
                 Column("device total ms", title="with the kernels of the ops it called")]
    cols += [Column("host self ms", title="host time not spent in ops it called"),
             Column("host total ms")]
    sort_by = ops.sort_by
    table = Table(cols, caption=f"sorted by {SORT_LABELS.get(sort_by, sort_by.replace('_', ' '))}"
                                " (whole trace)")
    for r in ops.rows[:rows]:
        name = r.name + (f" {r.shape}" if r.shape else "")
        cells = [text(name), num(r.calls, 0)]
        if device:
            cells += [num(_ms(r.device_self_us), 2), num(_ms(r.device_total_us), 2)]
        cells += [num(_ms(r.host_self_us), 2), num(_ms(r.host_total_us), 2)]
        table.rows.append(cells)
    return table


def kernels_table(kernels: KernelStats, rows: int = DEFAULT_ROWS) -> Table:
    cols = [Column("kernel", numeric=False), Column("calls"), Column("total ms"),
            Column("mean µs"), Column("share", title="of all kernel time"),
            Column("occupancy", title="estimated from the launch size"),
            Column("Tensor Cores", numeric=False),
            Column("class", numeric=False, title="docs/kernel_classes.md"),
            Column("launched by", numeric=False)]
    table = Table(cols, caption=_class_caption(kernels.classes))
    shown = kernels.rows[:rows]
    for r, name in zip(shown, distinct_names([r.name for r in shown]), strict=True):
        table.rows.append([
            Cell(name, title=r.name if name != r.name else ""), num(r.calls, 0),
            num(_ms(r.total_us), 2), num(r.mean_us, 1), num(r.share_pct, 1, "%"),
            num(r.occupancy_pct, 0, "%"), text("yes" if r.tensor_cores else "no"),
            text(_class_label(r)), text(r.op or ""),
        ])
    return table


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
    return (f"Kernel time: communication {fmt(p.get('communication'), 1, '%')}, Tensor Core "
            f"{fmt(p.get('tensor_core'), 1, '%')}, other compute {fmt(p.get('compute'), 1, '%')}"
            f"; unclassified (counted as compute) {fmt(classes.unclassified_pct, 1, '%')}")


def idle_gaps_table(idle: IdleTime, rows: int = 10) -> Table | None:
    gaps = idle.longest
    if not gaps:
        return None
    cols = [Column("step"), Column("device"),
            Column("at ms", title="from the start of the step window"),
            Column("gap µs"), Column("kind", numeric=False),
            Column("what the CPU was doing (top-level ops, µs)", numeric=False)]
    table = Table(cols)
    for g in gaps[:rows]:
        host = [(h.overlap_us, h.name) for h in g.host]
        if g.no_host_op_us >= 1:
            host.append((g.no_host_op_us, "(no op recorded)"))
        meanwhile = ", ".join(f"{n} {us:,.0f}" for us, n in sorted(host, reverse=True))
        table.rows.append([
            num(g.step, 0) if g.step is not None else Cell("", -1),
            text(g.device), num(g.start_ms, 1), num(g.duration_us, 0),
            text(g.category.replace("_", " ")), text(meanwhile),
        ])
    return table


def communication_table(comm: Communication) -> Table | None:
    """Per collective type: calls and busy ms per step, the share hidden by compute."""
    if not comm.count or not comm.types:
        return None
    cols = [Column("collective", numeric=False), Column("per step"), Column("ms/step"),
            Column("hidden by compute", title="share of its time overlapped with compute")]
    table = Table(cols)
    for t in comm.types:
        table.rows.append([text(t.type), num(t.count_per_step(comm.steps), 1),
                           num(t.busy_ms_per_step(comm.steps), 2), num(t.overlap_pct, 0, "%")])
    return table


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000.0


def stragglers_table(section: Stragglers | None, all_ranks: bool = False) -> Table | None:
    """Per rank: step time, communication, and the waiting it suffered and caused (every
    rank's row with ``all_ranks``, else the slowest, the fastest and the straggler)."""
    ranks = [] if section is None else section.ranks
    if section is None or len(ranks) < 2:
        return None
    cols = [Column("rank"), Column("median step ms"), Column("comm ms/step"),
            Column("exposed comm ms/step"), Column("waited ms/step"),
            Column("caused wait ms/step", title="time other ranks waited for this one"),
            Column("last to arrive", title="collectives this rank reached last"),
            Column("skew ms/step", title="waiting for the last rank to arrive (trace clocks)"),
            Column("transfer ms/step", title="from the last arrival to the end of its calls"),
            Column("caused skew ms/step",
                   title="the other ranks' wait for this one to arrive (trace clocks)")]
    table = Table(cols)
    shown = shown_rows(ranks, keep=(section.straggler,), by="step_median_ms",
                       all_ranks=all_ranks)
    if len(shown) < len(ranks):
        table.caption = (f"{len(shown)} of {len(ranks)} ranks: the slowest, the fastest and the "
                         "straggler; --all-ranks shows all.")
    for r in shown:
        table.rows.append([num(r.rank, 0), num(r.step_median_ms, 1),
                           num(r.comm_ms_per_step, 2),
                           num(r.exposed_comm_ms_per_step, 2),
                           num(r.waited_ms_per_step, 2),
                           num(r.caused_wait_ms_per_step, 2),
                           num(r.last_arrivals, 0),
                           num(r.skew_ms_per_step, 2),
                           num(r.transfer_ms_per_step, 2),
                           num(r.caused_skew_ms_per_step, 2)])
    if section.arrival:
        table.caption = " ".join(c for c in (table.caption, section.arrival) if c)
    return table
