"""Where a terminal report goes: the terminal, or a plain-text file (``trainprof.fileio``)."""

from __future__ import annotations

from trainprof.fileio import FILE_WIDTH, print_or_save

__all__ = ["FILE_WIDTH", "print_or_save"]
