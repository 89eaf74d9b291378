"""Tables of the HTML report as plain data (the template escapes every cell).

A ``Table`` is columns and rows of ``Cell``; a cell's ``sort`` value (a number, or the text)
goes into ``data-v`` so the page's small script can sort by it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import field

from trainprof.formatting import number

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


def ms_of_us(us: float | None) -> float | None:
    """Microseconds as milliseconds, for a ``num`` cell (None stays None)."""
    return None if us is None else us / 1000.0


def num(value: float | None, digits: int = 1, unit: str = "") -> Cell:
    return Cell(fmt(value, digits, unit), -1e300 if value is None else float(value))


def text(value: Any) -> Cell:
    return Cell("" if value is None else str(value))
