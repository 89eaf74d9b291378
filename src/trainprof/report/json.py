"""The JSON result: a stable contract (``schema: trainprof.analysis/1``) for tools and CI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from trainprof.analysis.overview import Analysis
from trainprof.fileio import atomic_write_bytes


def to_json_bytes(analysis: Analysis | dict[str, Any]) -> bytes:
    """Pretty-printed JSON; non-finite floats become null."""
    data = analysis.to_dict() if isinstance(analysis, Analysis) else analysis
    return msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n"


def write_json(analysis: Analysis | dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the result atomically (a reader never sees half a file)."""
    return atomic_write_bytes(Path(path), to_json_bytes(analysis))
