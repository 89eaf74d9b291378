"""Terminal views of the roofline and collectives sections (docs/roofline.md)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from trainprof.analysis.collective_bandwidth import Collectives
from trainprof.analysis.collective_ranks import CollectiveRanks
from trainprof.analysis.roofline import Roofline, RooflineRow
from trainprof.report.quantities import compact_table, pct, size

#: Shape rows shown under the classes.
SHAPE_ROWS = 8


def _us(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1000:.2f} ms" if value >= 1000 else f"{value:.0f} µs"


def _row(t: Table, label: str, r: RooflineRow) -> None:
    t.add_row(label, r.dtype, f"{r.calls}", _us(r.time_us), f"{r.achieved_tflops:.1f}",
              f"{r.achieved_tb_s:.2f}", f"{r.intensity:.0f}", r.bound or "n/a",
              pct(r.pct_of_roofline), _us(r.lost_us))


def _table(title: str) -> Table:
    t = compact_table(title)
    for col in ("op", "dtype", "calls", "time", "TFLOP/s", "TB/s", "FLOP/B", "bound",
                "% roof", "lost"):
        t.add_column(col, justify="left" if col in ("op", "dtype", "bound") else "right")
    return t


def render_roofline(result: Roofline) -> Group | None:
    if not result.classes:
        return None
    where = (f"{result.device.name} ({result.device_source})" if result.device
             else "unknown device: no roofline")
    classes = _table(f"Roofline per op class, {where}: {pct(result.coverage_pct)} of GPU time "
                     "modelled")
    for r in result.classes:
        _row(classes, r.op_class, r)
    shapes = _table("Costliest shapes against the roofline")
    for r in result.shapes[:SHAPE_ROWS]:
        _row(shapes, f"{r.op.removeprefix('aten::')} {r.shape}", r)
    return Group(classes, shapes)


def render_collectives(result: Collectives) -> Table | None:
    if not result.rows:
        return None
    t = compact_table(f"Collectives' bus bandwidth ({result.device or 'unknown device'}; "
                      f"{result.unsized} without sizes)")
    for col in ("collective", "size", "ranks", "calls", "time", "algbw GB/s", "busbw GB/s",
                "% of peak"):
        t.add_column(col, justify="left" if col == "collective" else "right")
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
