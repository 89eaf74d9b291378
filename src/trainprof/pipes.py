"""Messages between trainprof and its own worker processes (the analysis pool, the parallel
decode): each a length-prefixed pickle on a pipe. Only trainprof's processes read them."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path
from typing import IO, Any

_HEADER = struct.Struct("<Q")


def write_frame(stream: IO[bytes], obj: Any) -> None:
    """One message: its pickle's length, then the pickle."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next message; EOFError when the other side has closed."""
    head = _read_exactly(stream, _HEADER.size)
    return pickle.loads(_read_exactly(stream, _HEADER.unpack(head)[0]))


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def worker_env() -> dict[str, str]:
    """This process's environment, with this very trainprof package first on PYTHONPATH, for
    a worker started as ``python -m trainprof...``."""
    root = str(Path(__file__).resolve().parent.parent)  # the folder that holds trainprof/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
