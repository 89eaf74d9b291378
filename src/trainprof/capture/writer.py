"""Writes one recorded cycle as a gzipped Kineto trace, atomically, under a name that says its rank."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from trainprof.fileio import atomic_output, temp_path_beside

#: One file per rank and per recorded cycle; N is the last step of the cycle. The analyser reads
#: the rank from the name, and `*.pt.trace.json.gz` is what TensorBoard and HTA look for too.
TRACE_FILE_NAME = "rank{rank}.step{step}.pt.trace.json.gz"
_TRACE_FILE = re.compile(r"^rank(\d+)\.step\d+\.pt\.trace\.json\.gz$")  # TRACE_FILE_NAME, read back
#: Bytes read from the end of an exported trace to check that it was written to its end.
_TAIL_BYTES = 256


def trace_file_name(rank: int, step: int) -> str:
    return TRACE_FILE_NAME.format(rank=rank, step=step)


def traces_written_since(out_dir: str | os.PathLike[str], since: float) -> list[tuple[int, Path]]:
    """(rank, path) of the trace files in ``out_dir`` written at ``since`` (Unix seconds, 1 s
    of slack) or later, by any rank; sorted by path."""
    folder = Path(out_dir)
    if not folder.is_dir():
        return []
    found = ((_TRACE_FILE.match(p.name), p) for p in folder.iterdir())
    return sorted(((int(m.group(1)), p) for m, p in found
                   if m is not None and p.stat().st_mtime >= since - 1.0), key=lambda x: x[1])


def write_trace(profiler: Any, out_dir: str | os.PathLike[str], rank: int, step: int) -> Path:
    """Exports `profiler`'s last cycle to `out_dir` and returns the file's path.

    The profiler's plain JSON goes to a hidden `.tmp` file in `out_dir`, then is gzipped into the
    final name atomically, so a reader never sees a half-written trace. An export that did not
    reach its end (a full disk) raises `OSError` instead of leaving a broken trace.
    """
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / trace_file_name(rank, step)
    raw = temp_path_beside(final, ".raw")
    try:
        profiler.export_chrome_trace(str(raw))
        check_complete(raw)
        with open(raw, "rb") as src, atomic_output(final) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        # Kineto writes to `<name>.tmp` and renames it; a failed write leaves that file behind.
        for leftover in (raw, raw.with_name(raw.name + ".tmp")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return final


def check_complete(path: Path) -> None:
    """Raises `OSError` unless `path` holds a JSON document written to its end.

    Kineto only logs a failed write ("Failed to write to log file!"): the file is then empty, or
    cut off where the disk filled up, instead of ending with the document's closing brace.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - _TAIL_BYTES))
        tail = f.read().rstrip()
    if not tail.endswith(b"}"):
        raise OSError(f"the profiler's trace export stopped after {size} bytes (is the disk full?)")
