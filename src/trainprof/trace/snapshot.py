"""Reading a CUDA memory snapshot (`torch.cuda.memory._dump_snapshot`), safely.

A snapshot is a pickle, and unpickling can run any code the file names. A real snapshot holds
only dicts, lists, tuples, strings, numbers, booleans and None, and pickle builds all of those
without looking anything up; everything else (a class, a function such as `os.system`) goes
through `find_class`, which the restricted reader refuses. So an untrusted file can be read
without running any of it; `trust=True` (the CLI's `--trust`) reads it with plain `pickle`.
Gzipped snapshots (`.pickle.gz`) are read too.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
from pathlib import Path
from typing import Any

from trainprof.errors import TraceError

#: File names that `find_snapshot_files` takes for snapshots in a folder.
SNAPSHOT_SUFFIXES = (".pickle", ".pickle.gz", ".pkl", ".pkl.gz")
_GZIP_MAGIC = b"\x1f\x8b"


class SnapshotError(TraceError):
    """A memory snapshot cannot be read, or asks for code to run and was refused."""


class UnsafeSnapshotError(SnapshotError):
    """The snapshot names a class or function; reading it would run code."""


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data and refuses every global (class or function)."""

    def __init__(self, data: bytes, path: Path) -> None:
        super().__init__(io.BytesIO(data))
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        raise UnsafeSnapshotError(
            f"{self._path} asks to load {module}.{name} while unpickling; a memory snapshot "
            "holds only dicts, lists, strings and numbers, so this file may run code and was "
            "refused. Pass --trust (trust=True) only if you made the file yourself.")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeSnapshotError(
            f"{self._path} uses pickle persistent ids, which no memory snapshot does; refused.")


def load_snapshot(path: str | os.PathLike[str], trust: bool = False) -> dict[str, Any]:
    """The snapshot dict; `SnapshotError` (one sentence) when it is unreadable or refused."""
    path = Path(path)
    try:
        data = path.read_bytes()
        if data[:2] == _GZIP_MAGIC:
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise SnapshotError(f"Cannot read the memory snapshot {path}: {exc}.") from None
    try:
        snapshot = pickle.loads(data) if trust else _PlainDataUnpickler(data, path).load()
    except SnapshotError:
        raise
    except RecursionError:
        raise SnapshotError(f"{path} nests too deeply to be a memory snapshot.") from None
    except Exception as exc:  # pickle raises many kinds on a corrupt or foreign file
        raise SnapshotError(
            f"{path} is not a readable pickle ({type(exc).__name__}: {exc}); is it a memory "
            "snapshot from torch.cuda.memory._dump_snapshot?") from None
    return _checked(snapshot, path)


def _checked(snapshot: Any, path: Path) -> dict[str, Any]:
    """The snapshot if it has the documented shape (segments, device_traces), else an error."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("segments"), list):
        raise SnapshotError(
            f"{path} is a pickle but not a CUDA memory snapshot (no 'segments' list); make one "
            "with torch.cuda.memory._dump_snapshot() or trainprof.profile(memory_snapshot=True).")
    traces = snapshot.get("device_traces", [])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError(f"{path}: 'device_traces' is not a list of lists, as snapshots have.")
    for segment in snapshot["segments"]:
        if not isinstance(segment, dict) or not isinstance(segment.get("blocks", []), list):
            raise SnapshotError(f"{path}: a segment is not a dict with a 'blocks' list.")
    return snapshot


def is_snapshot_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(SNAPSHOT_SUFFIXES)


def find_snapshot_files(path: str | os.PathLike[str]) -> list[Path]:
    """The snapshot itself, or the snapshots in a folder (its sub-folders too), sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise SnapshotError(f"{path} does not exist.")
    return sorted(p for p in path.rglob("*") if is_snapshot_file(p))
