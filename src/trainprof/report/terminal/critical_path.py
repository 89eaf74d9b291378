"""Terminal view of the critical path: where its time goes, and the what-if table."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from trainprof.analysis.critical_path.result import CriticalPath
from trainprof.formatting import counted
from trainprof.report.names import distinct_names
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    name_room,
    pct,
)

#: How the split's keys read in the report.
CATEGORY_LABELS = {
    "host_compute": "host compute (ops)",
    "launch_overhead": "launch overhead",
    "gpu_compute": "GPU compute",
    "gpu_communication": "GPU communication",
    "copies": "copies",
    "sync_wait": "sync waits",
    "data_loading": "data loading",
    "untraced_host": "untraced host time",
}
ITEM_WIDTH = 48
#: The what-if table's number columns.
WHAT_IF_HEADERS = ("% of path", "step ms if 0", "if half", "saves ≤")


def render_critical_path(result: CriticalPath) -> Group | None:
    if not result.steps or result.step_ms is None:
        return None
    head = Text(f"Critical path: what sets the step time ({result.step_ms:.2f} ms a step, "
                f"{counted(len(result.steps), 'step')})", style="italic")
    split = compact_table()
    split.add_column("")
    add_number_columns(split, "ms/step", "% of step")
    n = len(result.steps)
    for key, us in sorted(result.split_us.items(), key=lambda kv: -kv[1]):
        if us > 0:
            split.add_row(CATEGORY_LABELS[key], f"{us / n / 1000:.2f}", pct(result.split_pct[key]))
    parts: list[RenderableType] = [head, split]
    if result.items:
        parts += [Text("What if one item on the path took no time, or half (the graph "
                       "replayed, so work that moves onto the path is counted):"),
                  ByWidth(lambda width: _what_if(result, width))]
    parts += [Text(note, style="dim") for note in result.notes]
    return Group(*parts)


def _what_if(result: CriticalPath, width: int) -> RenderableType:
    """The what-if table: each item's name shortened (C++ names, report/names.py) to the room
    its column has, and never two alike."""
    numbers = [[pct(item.on_path_pct), f"{item.step_ms_if_zero:.2f}",
                f"{item.step_ms_if_half:.2f}", pct(item.saving_pct_if_zero)]
               for item in result.items]
    room = name_room(width, [[h, *(row[i] for row in numbers)]
                             for i, h in enumerate(WHAT_IF_HEADERS)])
    kinds = [f"{item.kind}: " for item in result.items]
    longest_kind = max(map(len, kinds))
    names = distinct_names([item.name for item in result.items], max(room - longest_kind, 8))
    table = compact_table()
    add_name_column(table, "on the path", ITEM_WIDTH)
    add_number_columns(table, *WHAT_IF_HEADERS)
    for kind, name, row in zip(kinds, names, numbers, strict=True):
        table.add_row(name_cell(kind + name, ITEM_WIDTH), *row)
    return table
