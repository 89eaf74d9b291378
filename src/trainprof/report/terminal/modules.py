"""The module tree in the terminal (``analyze --modules``): one indented row per module path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.text import Text

from trainprof.analysis.sections.modules import ModuleRow, ModuleTree
from trainprof.formatting import counted
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    pct,
)

#: Modules under this share of all step time are left out of the text and Markdown trees.
MIN_SHARE_PCT = 1.0
#: The widest the module column gets.
MODULE_WIDTH = 60
#: Below this terminal width only the forward and backward totals are shown.
ALL_COLUMNS_FROM = 120


def shown_rows(tree: ModuleTree) -> tuple[list[ModuleRow], int]:
    """The rows of a ``modules`` result at or above ``MIN_SHARE_PCT``, in tree order, and how
    many were left out (a child never outweighs its parent, so whole subtrees go)."""
    kept = [r for r in tree.rows if r.share_pct >= MIN_SHARE_PCT]
    return kept, len(tree.rows) - len(kept)


#: A time column: its header and the row's time (µs) it shows.
Column = tuple[str, Callable[[ModuleRow], float]]


def columns(tree: ModuleTree) -> list[Column]:
    """The time columns: device time on GPU traces, host time otherwise."""
    if tree.clock == "device":
        return [("dev self", lambda r: r.device_self_us),
                ("dev fwd", lambda r: r.device_total_us),
                ("dev bwd", lambda r: r.backward_device_total_us),
                ("host fwd", lambda r: r.host_total_us)]
    return [("self", lambda r: r.host_self_us), ("fwd", lambda r: r.host_total_us),
            ("bwd", lambda r: r.backward_host_total_us)]


def render_modules(result: ModuleTree, show: bool = False) -> Any:
    """The tree, when ``show`` (``--modules``, ``AnalyzeOptions.modules``) asks for it; the way
    to record it when the trace has none."""
    if not show:
        return None
    if not result.available:
        return Text(result.note or "", style="yellow")
    return ByWidth(lambda width: _tree(result, width))


def _tree(result: ModuleTree, width: int) -> Group:
    kept, hidden = shown_rows(result)
    cols = columns(result)
    left_out = []
    if width < ALL_COLUMNS_FROM:  # the names need the room more than the self time
        left_out = [h for h, _ in cols[:1] + cols[3:]]
        cols = cols[1:3]
    clock = "kernel time" if result.clock == "device" else "host time"
    head = Text(f"Modules by {clock} (ms over {counted(result.steps, 'step')}; fwd and bwd include "
                "submodules; share of all step time)", style="italic")
    t = compact_table()
    add_name_column(t, "module", MODULE_WIDTH)
    add_number_columns(t, "calls", *(h for h, _ in cols), "share")
    for r in kept:
        t.add_row(name_cell("  " * r.depth + r.name, MODULE_WIDTH), str(r.calls),
                  *(f"{time(r) / 1000:.2f}" for _, time in cols), pct(r.share_pct))
    parts: list[Any] = [head, t]
    if left_out:  # said, never dropped silently
        parts.append(Text(f"Columns {' and '.join(left_out)} left out below {ALL_COLUMNS_FROM} "
                          "columns of terminal; all are in the JSON result", style="dim"))
    if hidden:
        parts.append(Text(f"{hidden} smaller modules (under {MIN_SHARE_PCT:g}% of the step "
                          "each) not shown; all are in the JSON result", style="dim"))
    if result.note:
        parts.append(Text(result.note, style="dim"))
    return Group(*parts)
