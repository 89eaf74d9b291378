"""Load trace files (one file, or a folder of ranks) into columnar ``Trace`` objects: Kineto
JSON here, Nsight Systems exports through trace/nsys/."""

from __future__ import annotations

import gc
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from trainprof.errors import NotATraceError, TraceError
from trainprof.trace import discover
from trainprof.trace.columns import ColumnBuilder
from trainprof.trace.decode import repair_notes
from trainprof.trace.kernel_context import apply_launch_context
from trainprof.trace.model import Trace
from trainprof.trace.nsys.detect import is_nsys_file, read_nsys
from trainprof.trace.parallel_decode import ByteProgress, decode_parallel, decode_workers
from trainprof.trace.stream import Chunk, EventReader

#: Called as ``progress(files_done, files_total, current_file)`` while loading.
Progress = Callable[[int, int, Path], None]
#: Told the bytes of JSON read so far by every ``load_file`` in this context (a progress bar).
_BYTES_WATCHER: ContextVar[ByteProgress | None] = ContextVar("bytes_watcher", default=None)


@contextmanager
def watching_bytes(callback: ByteProgress) -> Iterator[None]:
    """Within the block, ``load_file`` calls ``callback(bytes_read)`` as it reads."""
    token = _BYTES_WATCHER.set(callback)
    try:
        yield
    finally:
        _BYTES_WATCHER.reset(token)


def load_file(path: str | os.PathLike[str], rank: int = 0, window: int = 0,
              workers: int | None = None, progress: ByteProgress | None = None) -> Trace:
    """Decode one trace file. Raises ``TraceError`` when it is unreadable or not a trace.

    ``workers``: processes decoding it (default: one per core for a big trace, else 1, see
    trace/parallel_decode.py); ``progress`` is called with the bytes of JSON read so far.
    """
    path = Path(path)
    if is_nsys_file(path):  # the first rank of an export (load_traces reads all of them)
        return read_nsys(path)[0]
    if workers is None:
        workers = decode_workers(path)
    progress = progress or _BYTES_WATCHER.get()
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of short-lived, acyclic objects: collection only costs time here
    try:
        decoded = decode_parallel(path, workers, progress) if workers > 1 else None
        repairs: Counter = Counter()
        if decoded is None:
            reader = EventReader(path)
            builder = ColumnBuilder(path)
            columns = builder.add_all(_reporting(reader, progress)).finish()
            metadata, repairs = reader.metadata, reader.repairs
            repairs["negative_dur"] += builder.negative_durations
        else:
            columns, metadata, negative = decoded
            repairs["negative_dur"] += negative
    except RecursionError:
        raise TraceError(f"{path} nests values too deeply to be read (over a thousand levels "
                         "inside one event); no Kineto trace does that.") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path} is not valid UTF-8 JSON (byte {exc.start} of a piece: "
                         f"{exc.reason}); is the file damaged?") from None
    finally:
        if gc_was_on:
            gc.enable()
    events, memory, flows, threads, t0 = columns
    notes = repair_notes(repairs)
    base_ns = metadata.get("baseTimeNanoseconds")
    if isinstance(base_ns, int | float) and base_ns:
        t0 += base_ns / 1000.0  # newer exports store ts relative to this base
    trace = Trace(
        path=path,
        rank=rank,
        window=window,
        t0_us=t0,
        events=events,
        memory=memory,
        flows=flows,
        threads=threads,
        metadata=metadata,
        notes=notes,
    )
    apply_launch_context(trace)
    return trace


def load_traces(path: str | os.PathLike[str], workers: int | None = None,
                step_marker: re.Pattern[str] | None = None) -> list[Trace]:
    """Every rank one file holds: a Kineto trace holds one, an Nsight Systems export one per
    process that ran GPU work (``step_marker``: its NVTX ranges that mark steps, besides the
    usual names; docs/nsys.md). Raises ``TraceError`` like ``load_file``."""
    path = Path(path)
    if is_nsys_file(path):
        return read_nsys(path, step_marker)
    return [load_file(path, workers=workers)]


def _reporting(reader: EventReader, progress: ByteProgress | None) -> Iterator[Chunk]:
    """The reader's chunks, telling ``progress`` the bytes read after each."""
    for chunk in reader.chunks():
        if progress:
            progress(reader.bytes_read)
        yield chunk


def rank_in_trace(trace: Trace) -> int | None:
    """``distributedInfo.rank`` when the trace records it."""
    info = trace.metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and rank >= 0 else None


def iter_traces(path: str | os.PathLike[str], progress: Progress | None = None) -> Iterator[Trace]:
    """Each trace file under ``path`` in turn, with a provisional rank (see ``place_traces``)."""
    files = discover.find_trace_files(Path(path))
    single = Path(path).is_file()
    for i, file in enumerate(files):
        if progress:
            progress(i, len(files), file)
        try:
            traces = load_traces(file)
        except TraceError as exc:
            if single or not is_not_a_trace(exc):
                raise
            warnings.warn(f"{str(exc).rstrip('.')}; skipped.", stacklevel=2)
            continue
        yield from traces
    if progress:
        progress(len(files), len(files), files[-1])


def is_not_a_trace(exc: TraceError) -> bool:
    """Whether the file is no trace at all (skipped in a folder of traces, docs/traces.md)."""
    return isinstance(exc, NotATraceError)


def place_traces(traces: list[Trace]) -> list[str]:
    """Give each trace its final rank and window number; returns warnings for the user."""
    if not traces:
        return []
    placements, notes = discover.place(
        [t.path for t in traces], [rank_in_trace(t) for t in traces]
    )
    for trace, placement in zip(traces, placements, strict=True):
        trace.rank, trace.window = placement.rank, placement.window
    return notes


def load(path: str | os.PathLike[str], progress: Progress | None = None) -> list[Trace]:
    """Every trace under ``path`` (a file or a folder), ordered by rank then window.

    Raises ``TraceError`` for a missing path, a folder without traces, or an unreadable file.
    """
    traces = list(iter_traces(path, progress))
    if not traces:
        raise TraceError(f"{path} holds no Kineto traces (the files skipped above are not "
                         "traces).")
    for note in place_traces(traces):
        warnings.warn(note, stacklevel=2)
    return sorted(traces, key=lambda t: (t.rank, t.window))
