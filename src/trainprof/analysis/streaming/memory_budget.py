"""How much memory an analysis may use, and whether a trace must be streamed to stay within it.

A trace read whole takes about 1.2 to 1.3 bytes of memory per byte of JSON at its peak
(docs/performance.md); ``IN_MEMORY_BYTES_PER_JSON_BYTE`` adds a margin. A trace whose estimate
exceeds the budget is analysed window by window (analysis/streaming/streamed.py). The default budget is
half the memory available when the analysis starts: the estimate can be off by a quarter, the
page cache holds the spill being read back, and other programs keep running.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainprof.lazy import LazyPattern

#: Peak memory of analysing a trace read whole, per byte of its JSON (1.2-1.3 measured).
IN_MEMORY_BYTES_PER_JSON_BYTE = 1.5
#: The same per byte of an Nsight Systems export, which holds an event in fewer bytes than
#: JSON (3.8 measured on the 10x export of the 2xH100 capture, docs/nsys.md).
IN_MEMORY_BYTES_PER_EXPORT_BYTE = 5.0
#: The share of available memory used when no budget is given.
DEFAULT_SHARE = 0.5
#: Budget assumed when the available memory cannot be read.
FALLBACK_BYTES = 4 * 2**30
#: A gzipped trace's JSON is assumed at least this many times its size: the size trailer only
#: holds the size modulo 4 GiB, so a large trace can look small (10 GB reads as 1.4 GB).
GZIP_MIN_RATIO = 12
#: Size ratio assumed for a gzipped file whose size trailer is not to be trusted (over 4 GiB).
GZIP_RATIO = 12
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = LazyPattern(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_memory(text: str) -> int:
    """Bytes from ``4G``, ``512M``, ``1.5G``, ``2GiB`` or a plain number of bytes.

    Raises ``ValueError`` with one sentence for anything else."""
    found = _SIZE.match(str(text))
    if found is None or float(found.group(1)) <= 0:
        raise ValueError(f"--max-memory takes a positive size such as 4G, 512M or 1.5G, not "
                         f"{text!r}.")
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def default_budget() -> int:
    """``DEFAULT_SHARE`` of the memory available now (``FALLBACK_BYTES`` when unknown)."""
    available = available_memory()
    return int(available * DEFAULT_SHARE) if available else FALLBACK_BYTES


def json_estimate(path: Path) -> int:
    """The trace's JSON size, erring large for gzip (see ``GZIP_MIN_RATIO``)."""
    size = json_bytes(path)
    with open(path, "rb") as handle:
        gz = handle.read(2) == b"\x1f\x8b"
    return max(size, path.stat().st_size * GZIP_MIN_RATIO) if gz else size


def in_memory_estimate(path: Path) -> int:
    """Peak bytes of analysing ``path`` read whole (a JSON trace or an nsys export)."""
    from trainprof.trace.nsys.detect import is_sqlite

    if is_sqlite(path):
        return int(path.stat().st_size * IN_MEMORY_BYTES_PER_EXPORT_BYTE)
    return int(json_estimate(path) * IN_MEMORY_BYTES_PER_JSON_BYTE)


def json_equivalent(path: Path) -> int:
    """The bytes of JSON whose read would take the memory that reading ``path`` takes: its
    JSON's size, or for an nsys export its size scaled by the two bytes-per-byte figures (the
    pool sizes its processes in bytes of JSON)."""
    from trainprof.trace.nsys.detect import is_sqlite

    if is_sqlite(path):
        return int(path.stat().st_size * IN_MEMORY_BYTES_PER_EXPORT_BYTE
                   / IN_MEMORY_BYTES_PER_JSON_BYTE)
    return json_bytes(path)


def needs_streaming(path: Path, budget: int) -> bool:
    """Whether the trace read whole would exceed ``budget`` bytes."""
    return in_memory_estimate(path) > budget


def available_memory() -> int | None:
    """Bytes of memory available to new work: the kernel's ``MemAvailable`` (read in
    microseconds; psutil, which reads the same, takes 10 ms to import), else psutil's figure,
    else the free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def json_bytes(path: Path) -> int:
    """The size of a trace's JSON: the file's, or for gzip its size trailer (mod 4 GiB)."""
    size = path.stat().st_size
    if not path.name.endswith(".gz") or size < 18:
        return size
    with open(path, "rb") as handle:
        handle.seek(-4, os.SEEK_END)
        trailer = int.from_bytes(handle.read(4), "little")
    return trailer if trailer >= size else size * GZIP_RATIO
