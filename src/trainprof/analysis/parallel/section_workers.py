"""A loaded trace's sections on every core: forked children share the trace copy-on-write.

The sections of one trace (the overview's windowed ones and the deep ones of
analysis/sections/registry.py) are independent of each other given the trace and its steps.
For a big trace this process computes the facts several sections share (cached on the
trace), then forks children (``os.fork``: they inherit the loaded trace and those facts
without copying them); each process, this one included, takes the next section from a shared
queue (the costliest first) whenever it is free and computes it whole (this one first computes
the sections whose results are the largest to send back, HOME_JOBS), and the children write
each result, pickled, to a file of their own (memory, where the system has /dev/shm). The
results are the serial run's to the bit: each section runs whole in one process. A child that dies or raises leaves its missing sections to
this process, which computes them itself (a section that raises then raises here, as in a
serial run). Ctrl-C here kills the children, whenever it comes: SIGINT is held back while a
child is forked and recorded and while the children are stopped (trainprof/interrupts.py,
docs/robustness.md "Ctrl-C"); a child ignores it and ends with ``os._exit`` (no atexit
handlers, no second flush of this process's stdio buffers). docs/performance.md ("Sections
on every core").
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import msgspec

from trainprof.analysis.streaming.memory_budget import available_memory
from trainprof.analysis.streaming.windows import DEFAULT_COST
from trainprof.interrupts import held_call, held_interrupts, ignore_interrupts
from trainprof.pipes import read_frame, write_frame
from trainprof.trace.model import Trace
from trainprof.trace.parallel_decode import SHARED_DIR, usable_cores

#: Set to a number of processes (1: serial) to override the choice; the analysis pool's
#: workers set it to 1 (the files already share the cores).
WORKERS_ENV = "TRAINPROF_SECTION_WORKERS"
#: Traces with fewer events are analysed in one process: forking, the children's
#: copy-on-write faults and the pickles cost more than a second core saves below it
#: (docs/performance.md, "Sections on every core").
PARALLEL_MIN_EVENTS = 100_000
#: Sections this process computes itself, first, rather than queue: their results are the
#: largest to send back (the critical path's pieces: 7 MB on the 53 MB reference trace, about
#: 10 ms for a child to pickle and 2 ms to load here, more than the section's own time saved).
HOME_JOBS = frozenset({"critical_path"})
#: Memory a child takes of its own (its sections' working memory, the pages it or this
#: process writes), as a share of this process's resident memory: 0.3 measured on the 1.1 GB
#: trace (351 MiB against 1.17 GiB), with a margin.
CHILD_MEMORY_SHARE = 0.5

#: A section as run here: (name, function of the trace and its steps).
Job = tuple[str, Callable[[Trace, Any], Any]]


def section_workers(trace: Trace) -> int:
    """Processes to compute this trace's sections: one per core for a big trace, else 1;
    ``TRAINPROF_SECTION_WORKERS`` overrides the count, but never where forking is unsafe or
    the children would not fit in the memory available."""
    if not fork_is_safe():
        return 1
    forced = os.environ.get(WORKERS_ENV, "")
    if forced.isdigit() and int(forced) >= 1:
        workers = int(forced)
    else:
        workers = usable_cores() if len(trace.events) >= PARALLEL_MIN_EVENTS else 1
    return workers if workers <= 1 else memory_allows(workers)


def memory_allows(workers: int) -> int:
    """``workers``, lowered so that each child's own memory (``CHILD_MEMORY_SHARE`` of this
    process's) fits in the memory available; as is where either is unknown."""
    available, resident = available_memory(), resident_bytes()
    if not available or not resident:
        return workers
    return max(1, min(workers, 1 + int(available // (resident * CHILD_MEMORY_SHARE))))


def resident_bytes() -> int | None:
    """This process's resident memory (Linux: /proc/self/statm), None where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def fork_is_safe() -> bool:
    """Whether this process may fork children that run Python: a system whose start method
    is fork (Linux, macOS), no other thread (one holding a lock would leave it held in the
    child), and not a daemonic multiprocessing worker or a Dask worker."""
    if not hasattr(os, "fork") or sys.platform not in ("linux", "darwin"):
        return False
    if threading.active_count() != 1:
        return False
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.current_process().daemon:
        return False
    return not _in_dask_worker()


def _in_dask_worker() -> bool:
    if "distributed" not in sys.modules:
        return False
    try:
        from distributed import get_worker

        get_worker()
    except Exception:  # ValueError outside a worker; any failure: not in one
        return False
    return True


def run_jobs(trace: Trace, steps: Any, jobs: Sequence[Job], workers: int,
             prepare: Callable[[Trace, Any], Any] | None = None) -> list[Any]:
    """Each job's result, in the order of ``jobs``, computed by ``workers`` processes (this
    one and ``workers - 1`` forked children; 1: all here, in order). ``prepare(trace, steps)``
    runs here first when there are children: what it caches on the trace, they inherit.

    The jobs wait in a pipe, the longest (by their sections' ``cost``) first; each process takes the next one
    (one byte, its index) whenever it is free, so the shares balance themselves whatever
    the costs on this trace. This process first computes the HOME_JOBS, which never queue."""
    if workers <= 1 or len(jobs) < 2:
        return [fn(trace, steps) for _, fn in jobs]
    if len(jobs) > 255:
        raise ValueError(f"{len(jobs)} sections: at most 255 can be shared among processes")
    if prepare is not None:
        # a failure here is met again, in the serial order, by the section that needs it
        with contextlib.suppress(Exception):
            prepare(trace, steps)
    home = [i for i, (name, _) in enumerate(jobs) if name in HOME_JOBS]
    costs = [getattr(section, "cost", DEFAULT_COST) for _, section in jobs]
    queued = [i for i in longest_first(costs) if i not in home]
    queue_r, queue_w = os.pipe()
    os.write(queue_w, bytes(queued))  # < a pipe's buffer
    os.close(queue_w)  # once every job is taken, a read gets the end
    results: dict[int, Any] = {}
    failure: tuple[int, Exception] | None = None
    pool = _Pool(queue_r)
    try:
        try:
            failure = _share(trace, steps, jobs, workers, home, queued, pool, results)
        finally:  # however a Ctrl-C comes, no child is left running or unreaped
            held_call(pool.stop)
    except BaseException:  # one that came as the `finally` began, before it could stop them
        held_call(pool.stop)
        raise
    out = []
    for i, (_, fn) in enumerate(jobs):
        if failure is not None and failure[0] == i:
            raise failure[1]
        # a child's missing result (it died or raised) is computed here, in the serial order
        out.append(results[i] if i in results else fn(trace, steps))
    return out


def _share(trace: Trace, steps: Any, jobs: Sequence[Job], workers: int, home: list[int],
           queued: list[int], pool: _Pool, results: dict[int, Any]
           ) -> tuple[int, Exception] | None:
    """Fork the children into ``pool``, compute the home jobs and those this process takes from
    the queue, then collect the children's results into ``results``; the job that raised here
    and its exception, if one did."""
    # frozen, this process's objects are left unwritten by the children's collections
    # (unless the caller froze some for its own forks: then as it left them)
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        for _ in range(min(workers - 1, len(queued))):
            with held_interrupts():  # a Ctrl-C now raises once the child is in the pool
                child = _Child.fork(trace, steps, jobs, pool.queue)
                if child is not None:
                    pool.children.append(child)
            if child is None:  # the system would not fork: fewer processes do the work
                break
    finally:
        if freeze:
            gc.unfreeze()
    failure = None
    for i in itertools.chain(home, _taken(pool.queue)):
        try:
            results[i] = jobs[i][1](trace, steps)
        except Exception as exc:  # raised by the caller, where a serial run would raise it
            failure = (i, exc)
            break
    for child in pool.children:
        results.update(child.collect())
    return failure


def longest_first(costs: Sequence[float]) -> list[int]:
    """The jobs' indexes, the costliest first, ties in the serial order."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def _taken(queue: int) -> Iterator[int]:
    """The jobs this process takes from the queue, one at a time, until none is left."""
    while True:
        token = os.read(queue, 1)
        if not token:
            return
        yield token[0]


class _Pool(msgspec.Struct):
    """The forked children and the queue of jobs they take from."""

    queue: int
    children: list[_Child] = msgspec.field(default_factory=list)
    closed: bool = False

    def stop(self) -> None:
        """Stop and reap every child, close the queue; again, it changes nothing."""
        for child in self.children:
            child.stop()
        if not self.closed:
            os.close(self.queue)
            self.closed = True


class _Child(msgspec.Struct):
    """A forked child and the file it writes its results to, one frame per section."""

    pid: int
    results: IO[bytes]
    reaped: bool = False  # by the system (SIGCHLD ignored): its pid is no longer its own

    @staticmethod
    def fork(trace: Trace, steps: Any, jobs: Sequence[Job], queue: int) -> _Child | None:
        """A child taking jobs from ``queue``; None when the system cannot start one (no
        memory or processes left, no room for its results file). Called with SIGINT held
        back: the child inherits the block and ignores SIGINT before it lets it through."""
        folder = SHARED_DIR if os.path.isdir(SHARED_DIR) else None
        parent = os.getpid()
        try:
            results = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (closed by stop)
        except OSError:
            return None
        try:
            pid = os.fork()
        except OSError:
            results.close()
            return None
        if pid == 0:  # the child: never returns
            try:
                _child_main(trace, steps, jobs, queue, results.fileno(), parent)
            finally:
                os._exit(1)
        return _Child(pid, results)

    def collect(self) -> dict[int, Any]:
        """Wait for the child to end; the results it wrote whole (a frame cut short or that
        does not load is left out, computed again by the caller). The child is left for
        ``stop`` to reap: its pid stays its own, whenever a Ctrl-C cuts this short."""
        try:
            self.reaped = _wait_for_exit(self.pid)
        except ChildProcessError:  # reaped by the system (SIGCHLD ignored)
            self.reaped = True
        out: dict[int, Any] = {}
        self.results.seek(0)
        while True:
            try:
                i, result = read_frame(self.results)
            except Exception:  # the end, or a frame cut short by the child's death
                return out
            out[i] = result

    def stop(self) -> None:
        """Kill the child if it still runs (after an error or Ctrl-C here), reap it, close."""
        if not self.reaped:  # a child that has ended waits, unreaped, for this
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.reaped = True
        self.results.close()


def _child_main(trace: Trace, steps: Any, jobs: Sequence[Job], queue: int, fd: int,
                parent: int) -> None:
    """Take jobs from the queue until none is left, writing each result as it is done; end
    with ``os._exit``: 0 when every result was written, 1 when a section raised or a result
    would not pickle (its job, and any taken after, are then the parent's)."""
    code = 1
    try:
        ignore_interrupts()  # Ctrl-C: the parent kills the children
        _die_with(parent)
        with os.fdopen(os.dup(fd), "wb") as stream:
            for i in _taken(queue):
                write_frame(stream, (i, jobs[i][1](trace, steps)))
        code = 0
    except BaseException:  # the parent computes what is missing, and raises it as serial would
        pass
    finally:
        os._exit(code)


def _wait_for_exit(pid: int) -> bool:
    """Until the child ``pid`` has ended, leaving it unreaped where the system can
    (``waitid`` with WNOWAIT: False), else reaping it (True)."""
    if hasattr(os, "waitid") and hasattr(os, "WNOWAIT"):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        return False
    os.waitpid(pid, 0)  # pragma: no cover (Linux and macOS have waitid)
    return True  # pragma: no cover


def _die_with(parent: int) -> None:
    """On Linux, have the kernel kill this child when the parent dies (e.g. SIGKILL)."""
    if sys.platform == "linux":
        with contextlib.suppress(Exception):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before that took effect
        os._exit(1)
