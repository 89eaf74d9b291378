"""Numbers as people read them (bytes in MB/GB, times in µs/ms, shares in %), and the table
style of the idle, copy, memory and communication sections."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from trainprof.formatting import ms, pct, size  # noqa: F401 (re-exported)

# The number formats themselves: trainprof/formatting.py (re-exported here for the renderers).


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def compact_table(title: str | None = None) -> Table:
    """A table in the deep sections' style: a rule under the head, no box, left title."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                 show_edge=False, padding=(0, 1))


def add_name_column(table: Table, header: str, max_width: int, **options: Any) -> None:
    """A column of names (ops, kernels, call sites): in a narrow terminal it gives way first, its
    cells cut with … (see ``name_cell``), so that the columns of numbers keep their width. (No
    minimum width: rich would restore it after shrinking and crop the table's right edge.)"""
    table.add_column(header, no_wrap=False, overflow="ellipsis", ratio=max_width, **options)
    table.expand = True


def add_number_columns(table: Table, *headers: str) -> None:
    """Right-aligned columns that are never narrower than their header nor wrapped."""
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True, min_width=len(header))


def name_room(width: int, numbers: Sequence[Sequence[str]], share: float = 1.0) -> int:
    """The characters a table's name column gets beside its number columns (``numbers``: each
    column's header and cells) in ``width``; ``share``: its part of the room left when other
    name columns divide it (their ``ratio``)."""
    used = sum(max(map(len, column)) + 3 for column in numbers)  # 3: padding and rule
    return max(int((width - used - 2) * share), 8)


def name_cell(text: str, width: int) -> Text:
    """A name clipped to ``width``, and cut with … (never wrapped) where the column is narrower."""
    return Text(text, no_wrap=True, overflow="ellipsis")


class ByWidth:
    """A renderable built for the width it is given: a table can put what does not fit beside
    a name (an op's shapes, a kernel's launcher) on a second line in a narrow terminal, and keep
    it in a column of its own in a wide one."""

    def __init__(self, build: Callable[[int], RenderableType]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.build(options.max_width)


def two_line_name(name: str, detail: str, wrap: bool = False) -> RenderableType:
    """A name with a dim line under it: cut with … where the column is narrower, or, with
    ``wrap``, the detail wrapped over as many lines as it needs (shapes must be read whole)."""
    if not wrap:
        text = Text(name, no_wrap=True, overflow="ellipsis")
        text.append("\n  " + detail, style="dim")
        return text
    return Group(Text(name, no_wrap=True, overflow="ellipsis"),
                 Padding(Text(detail, style="dim", overflow="fold"), (0, 0, 0, 2)))


def duration(us: float | None) -> str:
    """A time given in µs: ``850 µs`` under a millisecond, ``1.25 ms`` from one on."""
    if us is None:
        return "n/a"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"
