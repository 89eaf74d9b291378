"""Writes one recorded cycle as a gzipped Kineto trace, atomically, under a name that says its rank."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from trainprof.fileio import atomic_output, temp_path_beside

#: One file per rank and per recorded cycle; N is the last step of the cycle. The analyser reads
#: the rank from the name, and `*.pt.trace.json.gz` is what TensorBoard and HTA look for too.
TRACE_FILE_NAME = "rank{rank}.step{step}.pt.trace.json.gz"


def trace_file_name(rank: int, step: int) -> str:
    return TRACE_FILE_NAME.format(rank=rank, step=step)


def write_trace(profiler: Any, out_dir: str | os.PathLike[str], rank: int, step: int) -> Path:
    """Exports `profiler`'s last cycle to `out_dir` and returns the file's path.

    The profiler's plain JSON goes to a hidden `.tmp` file in `out_dir`, then is gzipped into the
    final name atomically, so a reader never sees a half-written trace.
    """
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / trace_file_name(rank, step)
    raw = temp_path_beside(final, ".raw")
    try:
        profiler.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, atomic_output(final) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        with contextlib.suppress(FileNotFoundError):
            raw.unlink()
    return final
