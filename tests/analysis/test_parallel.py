"""Parallel analysis of a folder of ranks: the same result as serial, sized by cores and memory."""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import threading
import time
import warnings

import psutil
import pytest

import trainprof
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.parallel.pool import (
    PEAK_BYTES_PER_JSON_BYTE,
    WORKER_BASE_BYTES,
    analyze_files,
    worker_count,
)
from trainprof.analysis.streaming.memory_budget import json_bytes
from trainprof.errors import TraceError
from trainprof.report.json import to_json_bytes
from trainprof.trace.load import load_file

from helpers.ctrl_c import ctrl_c_as_a_worker_starts
from helpers.paths import NCCL_TRACE, TRACE_FILTER
from rank_scenarios import gpu_rank, in_job_of

MIB = 2**20


@pytest.fixture(scope="module")
def job_folder(tmp_path_factory):
    """Five ranks of one 128-rank job: two real ones (trace_filter), a real A100 DDP rank and
    two synthetic ones, made one job (world size 128, recordings starting together: a folder
    of unrelated traces is refused, docs/traces.md), and a JSON file that is not a trace."""
    folder = tmp_path_factory.mktemp("job")
    for file in sorted(TRACE_FILTER.glob("*.json.gz")):
        shutil.copy(file, folder / file.name)
    start_us = load_file(TRACE_FILTER / "sampled_rank-0.json.gz").t0_us
    a100 = json.loads(gzip.decompress(NCCL_TRACE.read_bytes()))
    a100["distributedInfo"].update(rank=2, world_size=128)
    a100["baseTimeNanoseconds"] -= round((load_file(NCCL_TRACE).t0_us - start_us) * 1000)
    (folder / "rank2.json.gz").write_bytes(gzip.compress(json.dumps(a100).encode(), 1))
    for rank, extra in ((3, {"compute": 400}), (4, None)):
        in_job_of(gpu_rank(rank, extra), TRACE_FILTER / "sampled_rank-0.json.gz", 128).write(
            folder / f"rank{rank}.json")
    (folder / "settings.json").write_text('{"lr": 0.1}')
    return folder


def analysed(folder, workers):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainprof.analyze(folder, workers=workers, sort_by="calls", by_shape=True)
    return result, [str(w.message) for w in caught]


class WorkerWatch(threading.Thread):
    """Counts this process's analysis workers while it runs (the most seen at once)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.most, self.done = 0, threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.done.is_set():
            with contextlib.suppress(psutil.Error):
                workers = [c for c in me.children() if "trainprof.analysis.parallel.worker" in c.cmdline()]
                self.most = max(self.most, len(workers))
            time.sleep(0.01)

    def __enter__(self) -> WorkerWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join()


def test_parallel_equals_serial(job_folder):
    with WorkerWatch() as watch:
        serial, serial_warnings = analysed(job_folder, workers=1)
    assert watch.most == 0
    with WorkerWatch() as watch:
        parallel, parallel_warnings = analysed(job_folder, workers=3)
    assert watch.most == 2  # this process and two workers
    assert [r.rank for r in parallel.ranks] == [0, 1, 2, 3, 4]
    assert to_json_bytes(parallel) == to_json_bytes(serial)
    assert parallel_warnings == serial_warnings
    assert any("settings.json" in w for w in parallel_warnings)
    # the table options reached the workers: operators grouped by shape, sorted by calls
    assert parallel.ranks[2].sections.operators.by_shape


def test_progress_reaches_every_file(job_folder):
    seen = []
    with pytest.warns(UserWarning, match="settings.json"):
        trainprof.analyze(job_folder, workers=2, progress=lambda i, n, f: seen.append((i, n)))
    assert seen[-1] == (6, 6) and sorted({i for i, _ in seen}) == list(range(1, 7))


def test_an_unreadable_trace_fails_in_parallel_as_in_serial(tmp_path):
    gpu_rank(0).write(tmp_path / "rank0.json")
    (tmp_path / "rank1.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X",'))
    gpu_rank(2).write(tmp_path / "rank2.json")
    files = sorted(tmp_path.iterdir())
    with pytest.raises(TraceError) as serial:
        analyze_files(files, workers=1)
    with pytest.raises(TraceError) as parallel:
        analyze_files(files, workers=2)
    assert str(parallel.value) == str(serial.value) and "rank1.json.gz" in str(serial.value)


#: Ctrl-C (SIGINT to the process group) the moment a worker process has been started, before
#: this process has recorded it and before the worker's Python has started.
CTRL_C_AT_START = ctrl_c_as_a_worker_starts(
    "trainprof.analysis.parallel.pool",
    "workers.analyze_files([Path(f) for f in sys.argv[1:]], workers=2)")


def test_ctrl_c_as_a_worker_starts_stops_it_silently():
    """The worker is recorded before the Ctrl-C is raised here, so it is stopped, and it
    ignores the Ctrl-C from its first instruction: no worker left, no traceback from one
    (before, the KeyboardInterrupt came out of the list of workers being started, and the
    worker was left behind)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    files = [str(f) for f in sorted(TRACE_FILTER.glob("*.json.gz"))]
    proc = subprocess.run([sys.executable, "-c", CTRL_C_AT_START, *files], capture_output=True,
                          text=True, env=env, timeout=60, start_new_session=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_worker_count_is_bounded_by_cores_and_memory():
    sizes = [100 * MIB] * 32
    per_worker = WORKER_BASE_BYTES + PEAK_BYTES_PER_JSON_BYTE * 100 * MIB
    assert worker_count(sizes, cores=2, available=None) == 2
    assert worker_count(sizes, cores=16, available=int(3.5 * per_worker)) == 3
    assert worker_count(sizes, cores=16, available=int(0.5 * per_worker)) == 1
    assert worker_count(sizes[:3], cores=16, available=None) == 3
    assert worker_count([10 * MIB, 400 * MIB], cores=8, available=int(2 * per_worker)) == 1


def test_json_size_of_gzip_from_its_trailer(tmp_path):
    data = b'{"traceEvents": []}' * 1000
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data))
    assert json_bytes(path) == len(data)
    assert json_bytes(NCCL_TRACE) == len(gzip.decompress(NCCL_TRACE.read_bytes()))


def test_the_processes_share_the_memory_budget(tmp_path):
    """With --max-memory, two processes each get half (less a process's base): a trace that
    fits the whole budget but not half of it is streamed in parallel and read whole serially."""
    from trainprof.analysis.parallel.pool import worker_budget
    from trainprof.analysis.streaming.memory_budget import in_memory_estimate

    for rank in range(2):
        gpu_rank(rank).write(tmp_path / f"rank{rank}.json")
    files = sorted(tmp_path.iterdir())
    estimate = max(in_memory_estimate(f) for f in files)
    budget = 2 * (WORKER_BASE_BYTES + estimate) - 2
    assert worker_budget(budget, 1) >= estimate > worker_budget(budget, 2)

    def streamed(workers):
        ranks = analyze_files(files, workers=workers, options=AnalyzeOptions(max_memory=budget))
        return [any(n.startswith("Streamed") for n in r.notes) for r in ranks]

    assert streamed(1) == [False, False]
    assert streamed(2) == [True, True]


def test_a_process_budget_is_its_share_less_its_base():
    assert worker_budget_of(8 * 2**30, 2) == 4 * 2**30 - WORKER_BASE_BYTES
    assert worker_budget_of(8 * 2**30, 1) == 8 * 2**30  # one process: the whole budget
    assert worker_budget_of(64 * MIB, 2) == 1  # a share below the base: stream in 1-step windows


def worker_budget_of(budget, count):
    from trainprof.analysis.parallel.pool import worker_budget

    return worker_budget(budget, count)


def test_available_memory_is_the_kernels_figure_as_psutil_reads_it():
    from trainprof.analysis.streaming.memory_budget import available_memory

    ours, theirs = available_memory(), psutil.virtual_memory().available
    assert ours is not None and abs(ours - theirs) < 0.05 * theirs
