"""Terminal views of the roofline and collectives sections (docs/roofline.md)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from trainprof.analysis.job.collective_ranks import CollectiveRanks
from trainprof.analysis.roofline.collectives import Collectives
from trainprof.analysis.roofline.section import Roofline, RooflineRow
from trainprof.formatting import counted
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    pct,
    size,
    two_line_name,
)

#: Shape rows shown under the classes.
SHAPE_ROWS = 8
#: Terminal width from which every figure gets its own column.
WIDE = 120
NAME_WIDTH = 40


def _us(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.0f} µs"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000:.2f}"


def _table(title: str, rows: list[tuple[str, str, RooflineRow]], width: int) -> Table:
    """One row per (name, detail, figures); at WIDE columns and more the dtype, calls,
    intensity and bound get columns, below it they go on a dim line under the name."""
    wide = width >= WIDE
    t = compact_table(title)
    add_name_column(t, "op", NAME_WIDTH)
    heads = (("dtype", "calls") if wide else ()) + ("ms", "TFLOP/s", "TB/s") + (
        ("FLOP/B", "bound") if wide else ()) + ("% roof", "ms lost")
    add_number_columns(t, *heads)
    for name, detail, r in rows:
        numbers = [_ms(r.time_us), f"{r.achieved_tflops:.1f}", f"{r.achieved_tb_s:.2f}"]
        tail = [pct(r.pct_of_roofline), _ms(r.lost_us)]
        if wide:
            label = f"{name} {detail}".strip()
            t.add_row(label, r.dtype, f"{r.calls}", *numbers, f"{r.intensity:.0f}",
                      r.bound or "n/a", *tail)
        else:
            more = f"{r.dtype}, {counted(r.calls, 'call')}, {r.bound or 'no'}-bound"
            t.add_row(two_line_name(name, f"{detail} · {more}" if detail else more, wrap=True),
                      *numbers, *tail)
    return t


def render_roofline(result: Roofline) -> ByWidth | None:
    if not result.classes:
        return None
    where = (f"{result.device.name} ({result.device_source})" if result.device
             else "unknown device: no roofline")

    def build(width: int) -> Group:
        classes = _table(f"Roofline per op class, {where}: {pct(result.coverage_pct)} of GPU "
                         "time modelled", [(r.op_class, "", r) for r in result.classes], width)
        shapes = _table("Costliest shapes against the roofline",
                        [(r.op.removeprefix("aten::"), r.shape, r)
                         for r in result.shapes[:SHAPE_ROWS]], width)
        return Group(classes, shapes)

    return ByWidth(build)


def render_collectives(result: Collectives) -> Table | None:
    if not result.rows:
        return None
    t = compact_table(f"Collectives' bus bandwidth ({result.device or 'unknown device'}; "
                      f"{result.unsized} without sizes)")
    add_name_column(t, "collective", 16)
    add_number_columns(t, "size", "ranks", "calls", "time", "algbw GB/s", "busbw GB/s",
                       "% of peak")
    for r in result.rows[:10]:
        peak = "n/a" if r.pct_of_peak is None else f"{r.pct_of_peak:.1f}% of {r.peak_gb_s:g}"
        t.add_row(r.type, size(r.bytes), f"{r.group_size}", f"{r.count}", _us(r.time_us),
                  f"{r.algbw_gb_s:.1f}", f"{r.busbw_gb_s:.1f}", peak)
    return t


def render_collective_ranks(result: CollectiveRanks) -> Table | None:
    """Per rank: its collectives' bus bandwidth, the slowest marked (two ranks or more)."""
    if len(result.rows) < 2:
        return None
    slow = result.slowest
    t = compact_table("Collectives' bus bandwidth per rank")
    for col in ("rank", "calls", "time", "busbw GB/s", "% of peak", ""):
        t.add_column(col, justify="left" if col in ("rank", "") else "right")
    for r in result.rows:
        window = f" w{r.window}" if r.window else ""
        t.add_row(f"{r.rank}{window}", f"{r.calls}", _us(r.time_us), f"{r.busbw_gb_s:.1f}",
                  pct(r.pct_of_peak), "slowest" if r is slow else "")
    return t
