"""Analysing many trace files at once, in worker processes bounded by cores and by memory.

Each file is loaded and analysed in one process and only its ``RankAnalysis`` comes back, so
a worker holds one rank's worth of memory at a time. This process analyses files too: N
workers are this process and N - 1 others (``analysis/parallel/worker.py``), each with one task queued
ahead so it never waits. Results are kept in file order: they equal a serial run's. Serial for
one file, one core, a small total, or ``workers=1``. docs/distributed.md. Ctrl-C stops every
worker whenever it comes: the workers are started, and stopped, with SIGINT held back
(trainprof/interrupts.py, docs/robustness.md "Ctrl-C").
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import threading
import warnings
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec
from msgspec import field

from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.parallel.worker import analyze_file
from trainprof.analysis.streaming.memory_budget import default_budget, json_equivalent
from trainprof.errors import TrainprofError
from trainprof.interrupts import held_call, held_interrupts
from trainprof.pipes import read_frame, worker_env, write_frame
from trainprof.structs import replace
from trainprof.trace.load import Progress

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from trainprof.analysis.results import RankAnalysis

#: What a worker costs besides its trace: the interpreter, numpy, msgspec and trainprof.
WORKER_BASE_BYTES = 64 * 2**20
#: Peak memory of analysing one trace, per byte of its JSON (about 1.0 measured on the 53 MB
#: reference trace; docs/performance.md), with a margin.
PEAK_BYTES_PER_JSON_BYTE = 1.5
#: Below this much JSON in all, files are analysed in this process: a worker takes about
#: 0.3 s to start, the time to analyse some 20 MB of JSON, so smaller jobs gain nothing.
PARALLEL_MIN_JSON_BYTES = 64 * 2**20
#: How long a worker may take to exit once its task pipe is closed (it is then killed), and
#: how long its reader thread may then take to see the end of its results pipe.
STOP_WAIT_S = 5.0


def analyze_files(files: list[Path], progress: Progress | None = None,
                  workers: int | None = None, executor: Executor | None = None,
                  from_folder: bool = False, options: AnalyzeOptions | None = None
                  ) -> list[RankAnalysis]:
    """The analysis of each file that is a trace, in file order (``workers``: see module),
    with ``options`` (None: the defaults), which every worker gets with each task.

    With an ``executor`` (any ``concurrent.futures.Executor``: a Dask client's, a process
    pool), each file is a task on it instead (analysis/parallel/on_executor.py) and ``workers`` is unused.
    ``from_folder``: the files were found in a folder, where a file that is not a trace is
    skipped with a warning even when it is the only one.
    """
    if not files:
        return []
    options = options or AnalyzeOptions()
    if executor is not None:
        from trainprof.analysis.parallel.on_executor import outcomes_on_executor

        return _kept(outcomes_on_executor(files, executor, progress, from_folder, options))
    sizes = [json_equivalent(f) for f in files]
    budget = options.max_memory or default_budget()
    count = worker_count(sizes, usable_cores(), budget) if workers is None else workers
    if workers is None and sum(sizes) < PARALLEL_MIN_JSON_BYTES:
        count = 1
    count = max(1, min(count, len(files)))
    # The processes share the budget: each trace is analysed within its share (read whole when
    # it fits, else streamed), so that together they stay within the whole.
    shared = replace(options, max_memory=worker_budget(budget, count))
    outcomes = (_serial(files, shared, progress, from_folder) if count == 1
                else _Pool(files, count, shared, progress).run())
    return _kept(outcomes)


def worker_budget(budget: int, count: int) -> int:
    """Each of ``count`` processes' share of ``budget`` bytes: all of it for one process, else
    an equal share less a process's own base cost (``WORKER_BASE_BYTES``)."""
    if count <= 1:
        return budget
    return max(budget // count - WORKER_BASE_BYTES, 1)


def _kept(outcomes: list[tuple[str, Any]]) -> list[RankAnalysis]:
    """The analyses, in file order; the first error raised, skipped files warned about."""
    results = []
    for status, payload in outcomes:
        if status == "error":
            raise payload
        if status == "skipped":
            warnings.warn(f"{str(payload).rstrip('.')}; skipped.", stacklevel=4)
            continue
        results.extend(payload if isinstance(payload, list) else [payload])
    return results


def _serial(files: list[Path], options: AnalyzeOptions, progress: Progress | None,
            from_folder: bool = False) -> list[tuple[str, Any]]:
    single, out = len(files) == 1 and not from_folder, []
    for i, file in enumerate(files):
        if progress:
            progress(i, len(files), file)
        out.append(analyze_file(file, options, single))
        if out[-1][0] == "error":
            break  # as a serial load stops at the first unreadable file
    if progress:
        progress(len(files), len(files), files[-1])
    return out + [("skipped", "not reached")] * (len(files) - len(out))


def worker_count(json_sizes: list[int], cores: int, available: int | None) -> int:
    """Processes to use: one per core, no more than ``available`` bytes hold (the largest
    file's peak per process), at least one."""
    by_memory = cores
    if available is not None and json_sizes:
        per_worker = WORKER_BASE_BYTES + PEAK_BYTES_PER_JSON_BYTE * max(json_sizes)
        by_memory = int(available // per_worker)
    return max(1, min(cores, by_memory, len(json_sizes) or 1))


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Pool:
    """This process and ``count - 1`` workers, each worker with one task queued ahead, each
    task with the analysis's ``options``."""

    def __init__(self, files: list[Path], count: int, options: AnalyzeOptions,
                 progress: Progress | None) -> None:
        self.files, self.count, self.progress = files, count, progress
        self.outcomes: list[tuple[str, Any] | None] = [None] * len(files)
        self.pending = deque(range(len(files)))
        self.results: queue.Queue = queue.Queue()
        self.options = options
        self.done = 0

    def run(self) -> list[tuple[str, Any]]:
        workers: list[_Worker] = []
        finished = False
        try:
            try:
                for w in range(self.count - 1):
                    # held: a Ctrl-C raises once the worker is in `workers`; the worker and its
                    # reader thread inherit the block (the worker ignores SIGINT, the reader keeps
                    # it blocked so that it is always this thread that gets it)
                    with held_interrupts():
                        worker = _Worker.start()
                        workers.append(worker)
                        worker.reader = threading.Thread(
                            target=_drain, args=(w, worker.proc.stdout, self.results), daemon=True)
                        worker.reader.start()
                for worker in workers:
                    self._send(worker)
                    self._send(worker)
                while self.pending or any(p.tasks for p in workers):
                    if self.pending:
                        i = self.pending.popleft()
                        # one decode process here: the workers take the other cores
                        self._finish(i, analyze_file(self.files[i], self.options, False, 1))
                    self._collect(workers, block=not self.pending)
                finished = True
            finally:
                _stop(workers, kill=not finished)
        except BaseException:  # a Ctrl-C that came as the `finally` began, before it stopped them
            _stop(workers, kill=True)
            raise
        if self.progress:
            self.progress(len(self.files), len(self.files), self.files[-1])
        return [o if o is not None else ("skipped", "not reached") for o in self.outcomes]

    def _collect(self, workers: list[_Worker], block: bool) -> None:
        """Take the workers' finished results (waiting for one if ``block``), refill them."""
        while any(p.tasks for p in workers):
            try:
                w, frame = self.results.get(block=block)
            except queue.Empty:
                return
            tasks = workers[w].tasks
            if frame is None:
                if tasks:
                    raise TrainprofError(f"A worker process stopped while analysing "
                                         f"{self.files[tasks[0]]}; retry with --jobs 1 (out "
                                         "of memory?).")
                continue
            tasks.popleft()
            self._finish(frame[0], frame[1:])
            self._send(workers[w])
            block = False

    def _send(self, worker: _Worker) -> None:
        if self.pending:
            i = self.pending.popleft()
            worker.tasks.append(i)
            write_frame(worker.proc.stdin, (i, self.files[i], self.options, False))  # type: ignore[arg-type]

    def _finish(self, i: int, outcome: tuple[str, Any]) -> None:
        self.outcomes[i] = outcome
        self.done += 1
        if outcome[0] == "error":
            raise outcome[1]
        if self.progress:
            self.progress(self.done, len(self.files), self.files[i])


class _Worker(msgspec.Struct):
    """A worker process and the files it has been sent, oldest first."""

    proc: subprocess.Popen
    tasks: deque[int] = field(default_factory=deque)
    reader: threading.Thread | None = None  # reads its results as they come

    @staticmethod
    def start() -> _Worker:
        """``python -m trainprof.analysis.parallel.worker``, finding this very trainprof package."""
        env = worker_env()
        env.setdefault("TRAINPROF_DECODE_WORKERS", "1")  # the files already share the cores
        env.setdefault("TRAINPROF_SECTION_WORKERS", "1")
        return _Worker(subprocess.Popen([sys.executable, "-m", "trainprof.analysis.parallel.worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))


def _drain(w: int, stream: IO[bytes], results: queue.Queue) -> None:
    """Read a worker's results as they come (None when it stops), so it never blocks writing."""
    while True:
        try:
            frame = read_frame(stream)
        except (EOFError, OSError, ValueError):
            results.put((w, None))
            return
        results.put((w, frame))


def _stop(workers: list[_Worker], kill: bool) -> None:
    """Close every worker's task pipe (it then exits); kill one that does not, or all of them
    at once after an error (their work is no longer wanted). A Ctrl-C meanwhile is raised
    once every worker is stopped."""
    held_call(lambda: _stop_all(workers, kill))


def _stop_all(workers: list[_Worker], kill: bool) -> None:
    for w in workers:
        if kill:
            w.proc.kill()
        with contextlib.suppress(OSError):
            w.proc.stdin.close()  # type: ignore[union-attr]
    for w in workers:
        try:
            w.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()
        if w.reader is not None:  # it ends at the end of the pipe, now that the worker is gone
            w.reader.join(timeout=STOP_WAIT_S)
        w.proc.stdout.close()  # type: ignore[union-attr]
