"""Numbers as people read them (bytes in MB/GB, times in µs/ms, shares in %), and the table
style of the idle, copy, memory and communication sections."""

from __future__ import annotations

from rich import box
from rich.table import Table

_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def size(nbytes: float | None) -> str:
    """Decimal units (10^6 bytes is a MB), as the docs say."""
    if nbytes is None:
        return "n/a"
    for unit, scale in _UNITS:
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}%"


def ms(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def compact_table(title: str) -> Table:
    """A table in the deep sections' style: a rule under the head, no box, left title."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                 show_edge=False, padding=(0, 1))
