"""Reading a W&B offline run file (``run-*.wandb``) back, for the tests.

The file is a LevelDB-style log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then
32 KiB blocks of records, each with a 7-byte header (CRC-32, length, type: 1 full, 2 first,
3 middle, 4 last); each whole record is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

_BLOCK = 32768
_HEADER = 7


#: How long to wait for the run's ``exit`` record: ``run.finish()`` hands the records to W&B's
#: service process, which may write the file's tail a moment after it returns (on a loaded
#: machine the history was once read back empty).
EXIT_WAIT_S = 60.0


def records(path: Path) -> list[Any]:
    """The run's records, once W&B has written its ``exit`` record (or after EXIT_WAIT_S)."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        found = _records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in found) \
                or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, pieces, out = _HEADER, b"", []
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + _HEADER])
        pos += _HEADER
        chunk, pos = data[pos:pos + length], pos + length
        if kind == 0 and length == 0:
            break
        pieces = chunk if kind in (1, 2) else pieces + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pieces)
            out.append(record)
            pieces = b""
    return out


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def history(path: Path) -> list[dict[str, str]]:
    """Each ``run.log`` call: {key: JSON text of the value}."""
    return [{_key(i): i.value_json for i in r.history.item}
            for r in records(path) if r.WhichOneof("record_type") == "history"]


def summary(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in records(path):
        if r.WhichOneof("record_type") == "summary":
            out.update({_key(i): i.value_json for i in r.summary.update})
    return out


def artifacts(path: Path) -> list[tuple[str, list[str]]]:
    """(name, file paths) of each artifact logged."""
    return [(r.artifact.name, [m.path for m in r.artifact.manifest.contents])
            for r in records(path) if r.WhichOneof("record_type") == "artifact"]


def tags(path: Path) -> list[str]:
    found: list[str] = []
    for r in records(path):
        if r.WhichOneof("record_type") == "run":
            found = list(r.run.tags)
    return found
