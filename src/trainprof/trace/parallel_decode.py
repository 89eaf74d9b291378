"""Decode one big trace on several cores, bit-identical to the serial read.

This process reads the file (gunzipping it) and cuts the event array into segments of whole
pieces, exactly where the serial read cuts its pieces (trace/stream.py). Worker processes
(trace/decode_worker.py) decode the segments into columns, each numbering names, threads,
shapes, stacks and details in its own tables. The segments are merged in file order, so each
table entry is renumbered in the order of its first appearance in the file, which is the serial
read's order, and every column comes out the same to the bit. Where a worker cannot promise
that (a cut inside a string, ids that need codes numbered across the file, a worker that died),
the file is read serially instead. docs/performance.md has the speed-ups.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from trainprof.errors import TraceError
from trainprof.interrupts import held_call, held_interrupts
from trainprof.pipes import read_frame, worker_env, write_frame
from trainprof.trace.columns import ColumnBuilder
from trainprof.trace.decode_worker import SegmentColumns, read_all, write_all
from trainprof.trace.stream import Segment, SegmentReader

#: Traces smaller than this (uncompressed JSON) are read serially: starting the workers
#: (about 0.2 s each) and moving the columns costs more than a second core saves below it.
PARALLEL_MIN_BYTES = 128 * 2**20
#: JSON sent to a worker at once: large enough that messages cost little, small enough that
#: every worker has several (the last one decoded alone is the parallel read's tail).
SEGMENT_BYTES = 8 * 2**20
#: Assumed inflation of a gzipped trace whose size trailer cannot be trusted (over 4 GiB).
GZIP_RATIO = 10
#: Set to a number of workers (1: serial) to override the choice, e.g. inside worker processes
#: that already share the cores among files.
WORKERS_ENV = "TRAINPROF_DECODE_WORKERS"
STOP_WAIT_S = 5.0
#: Segments handed to each worker ahead: 2, so that it decodes one while this process takes
#: the other's columns.
SLOTS = 2
#: Where the segments are handed to the workers (memory, not disk), when the system has it.
SHARED_DIR = "/dev/shm"

#: Called with the bytes of JSON read so far.
ByteProgress = Callable[[int], None]


def json_size(path: Path) -> int:
    """The trace's JSON size: the file's, or for gzip its size trailer (mod 4 GiB)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b" or size < 18:
            return size
        handle.seek(-4, os.SEEK_END)
        trailer = int.from_bytes(handle.read(4), "little")
    return trailer if trailer >= size else size * GZIP_RATIO


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def decode_workers(path: Path) -> int:
    """Workers for this file: one per core for a big trace, 1 (serial) for a small one."""
    forced = os.environ.get(WORKERS_ENV, "")
    if forced.isdigit() and int(forced) >= 1:
        return int(forced)
    try:
        size = json_size(path)
    except OSError:
        return 1  # the serial read names the problem
    return usable_cores() if size >= PARALLEL_MIN_BYTES else 1


def decode_parallel(path: Path, workers: int, progress: ByteProgress | None = None
                    ) -> tuple[tuple, dict[str, Any], int] | None:
    """``ColumnBuilder.finish()``'s columns, the metadata and the count of negative durations
    read as 0, or None: read it serially."""
    reader = SegmentReader(path)
    segments = reader.segments(SEGMENT_BYTES)
    if segments is None:
        return None
    pool = _Pool(path, workers)
    try:
        outcomes = pool.run(segments, lambda: progress and progress(reader.bytes_read))
    finally:
        pool.stop()
    metadata = dict(reader.metadata)
    builder = _merge(path, outcomes, metadata)
    return None if builder is None else (builder.finish(), metadata, builder.negative_durations)


def _merge(path: Path, outcomes: list[tuple[str, Any]], metadata: dict[str, Any]
           ) -> ColumnBuilder | None:
    """The segments' columns renumbered into one builder, in file order (each segment dropped
    once merged, to bound memory); None on a redo. The tail's metadata goes into ``metadata``."""
    if any(status == "redo" for status, _ in outcomes):
        return None
    merger = SegmentMerger(path, metadata)
    for i, outcome in enumerate(outcomes):
        outcomes[i] = (outcome[0], None)
        merger.add(*outcome)
    return merger.out


class Redo(Exception):
    """A segment could not be decoded on its own: read the file serially."""


class SegmentMerger:
    """Segments' columns renumbered into one ``ColumnBuilder`` (``out``), added in file order;
    the metadata of the tail goes into ``metadata``."""

    def __init__(self, path: Path, metadata: dict[str, Any]) -> None:
        self.out = ColumnBuilder(path)
        self.metadata = metadata
        self.kinds: dict[Any, tuple[int, int, int]] = {}

    def add(self, status: str, payload: Any) -> None:
        """Merge one segment's outcome; raises ``Redo`` for a redo, the error for an error."""
        out, kinds = self.out, self.kinds
        if status == "redo":
            raise Redo
        if status == "error":
            exc, first = payload
            raise first if out.t0 is None and isinstance(first, TraceError) else exc
        seg: SegmentColumns = payload
        self.metadata.update(seg.metadata)
        if out.t0 is None and seg.first_ts is not None:
            if isinstance(seg.first_ts, TraceError):
                raise seg.first_ts
            out.t0 = seg.first_ts
        names = np.empty(len(seg.kinds), dtype=np.int32)
        for key, (kind, local, flags) in seg.kinds:
            hit = kinds.get(key)
            if hit is None:
                kinds[key] = hit = (kind, len(out.names), flags)
                out.names.append(seg.names[local])
            names[local] = hit[1]
        threads = np.array([out.threads.setdefault(k, len(out.threads)) for k in seg.threads],
                           dtype=np.int32)
        if seg.events is not None:
            ev = dict(seg.events)
            ev["ts"] = ev["ts"] - out.t0
            ev["name"] = names[ev["name"]]
            ev["tid"] = threads[ev["tid"]]
            ev["shape"] = _renumbered(ev["shape"], _interned(out._shapes, seg.shapes))
            ev["stack"] = _renumbered(ev["stack"], _interned(out._stacks, seg.stacks))
            ev["op_args"] = _renumbered(ev["op_args"], _interned(out._op_args, seg.op_args))
            ev["detail"] = np.where(ev["detail"] >= 0, ev["detail"] + len(out.details), -1
                                    ).astype(ev["detail"].dtype)
            out._events.append(ev)
        out.details.extend(seg.details)
        out.negative_durations += seg.negative_durations
        for cols, parts in ((seg.memory, out._memory), (seg.flows, out._flows)):
            if cols is not None:
                cols = dict(cols)
                cols["ts"] = cols["ts"] - out.t0
                cols["tid"] = threads[cols["tid"]]
                parts.append(cols)


def decoded_segments(path: Path, workers: int
                     ) -> tuple[Generator[tuple[str, Any], None, None], SegmentReader] | None:
    """Each segment's outcome (as ``SegmentMerger.add`` takes it), in file order, as soon as it
    is decoded, with at most a few segments held at once (for a spill, trace/spill.py); and the
    reader (its ``metadata``). None: the file cannot be cut, read it serially."""
    reader = SegmentReader(path)
    segments = reader.segments(SEGMENT_BYTES)
    if segments is None:
        return None
    return _in_order(path, workers, segments), reader


def _in_order(path: Path, workers: int, segments: Iterator[Segment]
              ) -> Generator[tuple[str, Any], None, None]:
    pool = _Pool(path, workers)
    ahead = threading.Semaphore(workers * (SLOTS + 2))  # segments decoded but not yet taken
    stopping = threading.Event()
    count: list[int] = []  # how many segments there were, once all are handed out
    failure: list[BaseException] = []

    def put(item: Any) -> None:
        while not stopping.is_set():
            with contextlib.suppress(queue.Full):
                pool.tasks.put(item, timeout=0.1)
                return

    def feed() -> None:
        n = 0
        try:
            for n, seg in enumerate(segments, 1):
                while not ahead.acquire(timeout=0.1):
                    if stopping.is_set():
                        return
                put((n - 1, seg))
        except BaseException as exc:  # reading failed: the consumer raises it
            failure.append(exc)
        finally:
            for _ in pool.workers:
                put(None)
            count.append(n)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        i = 0
        while True:
            with pool.ready:
                while i not in pool.outcomes and not (count and i >= count[0]):
                    if count and not any(t.is_alive() for t in pool.threads):
                        break  # every worker is gone and segment i never came
                    pool.ready.wait(0.1)
                outcome = pool.outcomes.pop(i, None)
            if outcome is None:
                if failure:
                    raise failure[0]
                if count and i >= count[0]:
                    return
                yield ("redo", None)
                return
            ahead.release()
            yield outcome
            i += 1
    finally:
        stopping.set()
        pool.stop()
        feeder.join(timeout=STOP_WAIT_S)


def _interned(table: dict[bytes, int], keys: list[bytes]) -> np.ndarray:
    return np.array([table.setdefault(k, len(table)) for k in keys], dtype=np.int32)


def _renumbered(codes: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``new[code]`` for each code, -1 kept."""
    if not len(new):
        return codes
    out = new[np.maximum(codes, 0)]
    out[codes < 0] = -1
    return out


class _Pool:
    """Worker processes, each served by a thread that sends it a segment and waits for its
    columns; segments wait in a short queue, so at most a few are in memory at once."""

    def __init__(self, path: Path, count: int) -> None:
        self.path = path
        self.tasks: queue.Queue = queue.Queue(maxsize=count)
        self.outcomes: dict[int, tuple[str, Any]] = {}
        self.ready = threading.Condition()  # notified as each outcome arrives
        self.workers: list[_Worker] = []
        self.threads: list[threading.Thread] = []
        try:
            with held_interrupts():  # a Ctrl-C now raises once every started worker is recorded
                for _ in range(count):
                    self.workers.append(_Worker.start())
            self.threads = [threading.Thread(target=self._serve, args=(w,), daemon=True)
                            for w in self.workers]
            for t in self.threads:
                t.start()
        except BaseException:  # Ctrl-C: stop the workers started so far, then raise it
            self.stop()
            raise

    def run(self, segments: Iterator[Segment], tick: Callable[[], Any]) -> list[tuple[str, Any]]:
        n = 0
        for n, seg in enumerate(segments, 1):
            self.tasks.put((n - 1, seg))
            tick()
        for _ in self.workers:
            self.tasks.put(None)
        for t in self.threads:
            t.join()
        return [self.outcomes.get(i, ("redo", None)) for i in range(n)]

    def _serve(self, worker: _Worker) -> None:
        """Keep SLOTS segments at the worker, so that it never waits for this process to take
        its columns and hand it the next segment (on a busy machine that wait is long)."""
        pending: deque[tuple[int, int]] = deque()  # (segment, slot) sent, oldest first
        free, more, broken = list(range(SLOTS)), True, False
        while more or pending:
            while more and free:
                # With a segment at the worker, take only a task that is there: the consumer
                # may be waiting for that segment's columns before it lets the feeder put more.
                try:
                    item = self.tasks.get(block=not pending)
                except queue.Empty:
                    break
                if item is None:
                    more = False
                    break
                i, seg = item
                if broken:
                    self._arrived(i, ("redo", None))
                    continue
                try:
                    slot = free.pop()
                    write_all(worker.shared[slot], seg.data)
                    write_frame(worker.stdin,
                                (self.path, Segment(b"", seg.spans, seg.prefix), slot,
                                 len(seg.data)))
                    pending.append((i, slot))
                except Exception:  # the worker died: read the file serially
                    self._arrived(i, ("redo", None))
                    broken = True
            if not pending:
                continue
            i, slot = pending.popleft()
            try:
                if broken:
                    raise EOFError
                size = read_frame(worker.stdout)
                self._arrived(i, pickle.loads(read_all(worker.shared[slot], size)))
            except Exception:  # the worker died or sent nonsense: read the file serially
                self._arrived(i, ("redo", None))
                broken = True
            free.append(slot)

    def _arrived(self, i: int, outcome: tuple[str, Any]) -> None:
        with self.ready:
            self.outcomes[i] = outcome
            self.ready.notify_all()

    def stop(self) -> None:
        """Close every worker's pipe (it then exits); kill those still busy (after an error or
        Ctrl-C in this process), and release the threads."""
        held_call(self._stop)  # however a Ctrl-C comes, no worker is left running

    def _stop(self) -> None:
        busy = any(t.is_alive() for t in self.threads)
        for w in self.workers:
            if busy:
                w.proc.kill()
            with contextlib.suppress(OSError):
                w.proc.stdin.close()  # type: ignore[union-attr]
        while busy and any(t.is_alive() for t in self.threads):
            with contextlib.suppress(queue.Full):
                self.tasks.put(None, timeout=0.1)
        for w in self.workers:
            try:
                w.proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            for fd in w.shared:
                os.close(fd)


class _Worker(msgspec.Struct):
    """A decode worker and the file, in memory where the system has /dev/shm, that carries
    each segment to it and its columns back (through a pipe they cost about twice the CPU)."""

    proc: subprocess.Popen[bytes]
    shared: tuple[int, ...]  # one file per slot

    @property
    def stdin(self) -> IO[bytes]:
        return _pipe(self.proc.stdin)

    @property
    def stdout(self) -> IO[bytes]:
        return _pipe(self.proc.stdout)

    @staticmethod
    def start() -> _Worker:
        folder = SHARED_DIR if os.path.isdir(SHARED_DIR) else None
        shared = []
        for _ in range(SLOTS):
            with tempfile.TemporaryFile(dir=folder) as handle:
                shared.append(os.dup(handle.fileno()))
        return _Worker(_start_worker(tuple(shared)), tuple(shared))


def _start_worker(shared: tuple[int, ...]) -> subprocess.Popen:
    """``python -m trainprof.trace.decode_worker FD...``, finding this very trainprof package;
    it reads segments from, and writes columns to, the files ``shared``."""
    return subprocess.Popen([sys.executable, "-m", "trainprof.trace.decode_worker",
                             *map(str, shared)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=worker_env(), pass_fds=shared)


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """A worker's pipe (always there: the worker starts with both); EOFError, which the reader
    handles as a dead worker, where it is not."""
    if stream is None:
        raise EOFError
    return stream
