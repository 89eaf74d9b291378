"""Results as JSON text: numpy values, paths and results (their ``to_dict``) made plain, floats
tidied (trainprof/tidy.py), indented. The analysis JSON (report/json.py), the cluster summary
(trainprof/cluster_summary.py) and the other JSON outputs write through it."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import numpy as np

from trainprof.tidy import tidy


def _plain(value: Any) -> Any:
    """numpy scalars and arrays, paths and Struct results as JSON-ready values."""
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


def formatted(data: Any) -> bytes:
    """One value as indented JSON text ending in a newline, floats tidied."""
    # Results into plain values first (numpy, Structs), then floats tidied (trainprof/tidy.py).
    plain = msgspec.json.decode(_ENCODER.encode(data))
    return msgspec.json.format(_ENCODER.encode(tidy(plain)), indent=2) + b"\n"
