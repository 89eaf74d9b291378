"""The JSON result: a stable contract (``schema: trainprof.analysis/1``) for tools and CI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from trainprof.analysis.results import Analysis
from trainprof.fileio import atomic_write_bytes
from trainprof.report.tidy import tidy


def _plain(value: Any) -> Any:
    """numpy scalars and arrays, paths and dataclass results as JSON-ready values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_plain)


def to_json_bytes(analysis: Analysis | dict[str, Any]) -> bytes:
    """Pretty-printed JSON; non-finite floats become null."""
    data = analysis.to_dict() if isinstance(analysis, Analysis) else analysis
    # Results into plain values first (numpy, dataclasses), then floats tidied (report/tidy.py).
    plain = msgspec.json.decode(_ENCODER.encode(data))
    return msgspec.json.format(_ENCODER.encode(tidy(plain)), indent=2) + b"\n"


def write_json(analysis: Analysis | dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the result atomically (a reader never sees half a file)."""
    return atomic_write_bytes(Path(path), to_json_bytes(analysis))
