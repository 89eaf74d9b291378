"""Call sites as the terminal shows them: a frame's file, line and function."""

from __future__ import annotations

from trainprof.trace.model import split_frame


def file_line(frame: str) -> str:
    """``path/to/train.py(42): step`` as ``train.py:42 step``."""
    parts = split_frame(frame)
    if parts is None:
        return frame
    path, line, function = parts
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{base}:{line} {function}"
