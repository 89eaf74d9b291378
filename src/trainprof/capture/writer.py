"""Writes one recorded cycle as a gzipped Kineto trace, atomically, under a name that says its rank."""

from __future__ import annotations

import contextlib
import gzip
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

#: One file per rank and per recorded cycle; N is the last step of the cycle. The analyser reads
#: the rank from the name, and `*.pt.trace.json.gz` is what TensorBoard and HTA look for too.
TRACE_FILE_NAME = "rank{rank}.step{step}.pt.trace.json.gz"

#: zlib's own default: about as small as level 9 on trace JSON, several times faster to write.
GZIP_LEVEL = 6


def trace_file_name(rank: int, step: int) -> str:
    return TRACE_FILE_NAME.format(rank=rank, step=step)


def write_trace(profiler: Any, out_dir: str | os.PathLike[str], rank: int, step: int) -> Path:
    """Exports `profiler`'s last cycle to `out_dir` and returns the file's path.

    Both intermediate files live in `out_dir` under hidden `.tmp` names, so a reader never sees a
    half-written trace and the final `os.replace` stays on one file system.
    """
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / trace_file_name(rank, step)
    raw = _temp_path(directory, final.name + ".raw")
    packed = _temp_path(directory, final.name)
    try:
        profiler.export_chrome_trace(str(raw))
        # An empty inner name and mtime keep temp names and the clock out of the gzip header.
        with (
            open(raw, "rb") as src,
            open(packed, "wb") as sink,
            gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=GZIP_LEVEL, mtime=0) as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(packed, final)
    finally:
        for leftover in (raw, packed):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return final


def _temp_path(directory: Path, name: str) -> Path:
    """A new hidden file; made with mode 0o666 so that the umask, not mkstemp's 0o600, decides."""
    while True:
        path = directory / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return path
        except FileExistsError:
            continue
