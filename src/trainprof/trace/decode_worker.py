"""One worker of a parallel decode: ``python -m trainprof.trace.decode_worker``.

It reads segments of one trace's event array and writes back their columns, both through a
file in memory that the parent shares with it (/dev/shm); the pipes carry length-prefixed
pickles of the rest: the pieces' spans in, the result's size out. A plain subprocess, as for the analysis workers
(analysis/parallel/worker.py): no user code runs in it. Names, threads, shapes, stacks and details are
numbered in the segment's own tables; trace/parallel_decode.py renumbers them when it merges.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.errors import TraceError
from trainprof.interrupts import ignore_interrupts
from trainprof.pipes import read_frame, write_frame
from trainprof.trace import decode, stream
from trainprof.trace.columns import ColumnBuilder
from trainprof.trace.decode import _Event
from trainprof.trace.scan import ScannedPiece, events_or_scanned, scan_piece


class Redo(Exception):
    """The segment cannot be decoded on its own exactly as a serial read would: a cut fell
    inside a string, or ids need codes numbered across the file. The file is read serially."""


class SegmentColumns(msgspec.Struct):
    """One segment's columns, numbered in its own tables."""

    events: dict[str, np.ndarray] | None
    memory: dict[str, np.ndarray] | None
    flows: dict[str, np.ndarray] | None
    kinds: list[tuple[Any, tuple[int, int, int]]]  # (category, name) -> (kind, name, flags)
    names: list[str]
    threads: list[tuple[Any, Any]]
    shapes: list[bytes]
    stacks: list[bytes]
    op_args: list[bytes]
    details: list[dict[str, Any]]
    #: floor of the first events' earliest ts (the serial time origin when this segment holds
    #: the file's first events), or the TraceError that computing it raised; None: no events.
    first_ts: float | TraceError | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    negative_durations: int = 0  # read as 0 (ColumnBuilder.negative_durations)


class _SegmentBuilder(ColumnBuilder):
    """Columns with raw timestamps (origin 0); the origin the serial read would take is kept."""

    first: float | TraceError | None = None

    def _first_ts(self, times: Sequence[float | None] | np.ndarray) -> float:
        try:
            self.first = super()._first_ts(times)
        except TraceError as exc:
            self.first = exc
        return 0.0


def decode_segment(path: Path, seg: stream.Segment, builder: _SegmentBuilder) -> SegmentColumns:
    """Decode the segment's pieces as ``EventReader.chunks`` would, into columns."""
    metadata: dict[str, Any] = {}
    for start, end in seg.spans:
        builder.add(_decode_piece(path, b"[" + seg.data[start:end] + b"]"))
    if seg.prefix:
        try:
            if seg.prefix == b"[":
                events = events_or_scanned(seg.prefix + seg.data)
            else:
                parsed = decode.FILE_DECODER.decode(seg.prefix + seg.data)
                metadata = decode.metadata_of(parsed)
                events = events_or_scanned(bytes(parsed.traceEvents))
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise Redo from None  # the serial read names the problem
        builder.add(events)
    if builder._id_codes:
        raise Redo
    return SegmentColumns(
        events=_concat(builder._events), memory=_concat(builder._memory),
        flows=_concat(builder._flows), kinds=list(builder._kinds.items()), names=builder.names,
        threads=list(builder.threads), shapes=list(builder._shapes),
        stacks=list(builder._stacks), op_args=list(builder._op_args), details=builder.details,
        first_ts=builder.first, metadata=metadata, negative_durations=builder.negative_durations,
    )


def _decode_piece(path: Path, piece: bytes) -> list[_Event] | ScannedPiece:
    scanned = scan_piece(piece)
    if scanned is not None:
        return scanned
    try:
        return decode.LIST_DECODER.decode(piece)
    except msgspec.ValidationError:
        # An odd event: the serial read repairs it and counts the repair (decode_leniently),
        # or names the problem. Rare, so the whole file is read serially then.
        raise Redo from None
    except msgspec.DecodeError as exc:
        if stream._cut_is_the_cause(exc, len(piece)):
            raise Redo from None
        raise decode.trace_error(path, exc) from None


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray] | None:
    if not parts:
        return None
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def run_task(path: Path, seg: stream.Segment) -> tuple[str, Any]:
    """("ok", SegmentColumns), ("error", (TraceError, first_ts)) or ("redo", None)."""
    builder = _SegmentBuilder(path)
    try:
        return "ok", decode_segment(path, seg, builder)
    except TraceError as exc:
        return "error", (exc, builder.first)
    except Exception:  # RecursionError, UnicodeDecodeError, Redo: the serial read decides
        return "redo", None


def main() -> None:
    # Ctrl-C reaches the whole process group: the parent handles it and stops the workers.
    ignore_interrupts()
    tasks = sys.stdin.buffer
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt frames
    shared = [int(fd) for fd in sys.argv[1:]]  # the files (slots) the parent writes into
    while True:
        try:
            path, seg, slot, size = read_frame(tasks)
        except EOFError:
            return
        seg.data = read_all(shared[slot], size)
        outcome = pickle.dumps(run_task(path, seg), protocol=pickle.HIGHEST_PROTOCOL)
        write_all(shared[slot], outcome)  # the parent waits for it: the slot is free again
        write_frame(results, len(outcome))


def write_all(fd: int, data: bytes) -> None:
    """``data`` at the start of the file ``fd``."""
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.pwrite(fd, view[done:], done)


def read_all(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of the file ``fd``."""
    parts, done = [], 0
    while done < size:
        part = os.pread(fd, size - done, done)
        if not part:
            raise EOFError("the segment file is shorter than announced")
        parts.append(part)
        done += len(part)
    return b"".join(parts)


if __name__ == "__main__":
    # Run from the module's own name, so that results pickle as trainprof.trace.decode_worker.*,
    # not __main__.*.
    from trainprof.trace.decode_worker import main as _main

    _main()
