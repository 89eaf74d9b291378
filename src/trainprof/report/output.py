"""Where a terminal report goes: the terminal, or a plain-text file."""

from __future__ import annotations

import io
import os
from collections.abc import Callable

from rich.console import Console

from trainprof.fileio import atomic_write_text

#: Width of text reports written to a file (a terminal's own width is used on screen).
FILE_WIDTH = 120


def print_or_save(render: Callable[[Console], None],
                  output: str | os.PathLike[str] | None = None) -> None:
    """``render(console)`` to the terminal, or as plain text to ``output``, written atomically."""
    if output is None:
        render(Console())
        return
    console = Console(record=True, width=FILE_WIDTH, file=io.StringIO())
    render(console)
    atomic_write_text(output, console.export_text())
