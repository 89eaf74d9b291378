"""A folder's ranks analysed on any concurrent.futures executor: the local result, in file
order, and the first error stops every task not yet started."""

from __future__ import annotations

import gzip
import shutil
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

import trainprof
from trainprof.analysis.parallel.pool import analyze_files
from trainprof.errors import TraceError
from trainprof.report.json import to_json_bytes

from helpers.paths import TRACE_FILTER
from rank_scenarios import gpu_rank, in_job_of


class CountingPool(ThreadPoolExecutor):
    """A real thread pool that also counts the tasks that started running."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.started, self.lock = 0, threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        def counted():
            with self.lock:
                self.started += 1
            return fn(*args, **kwargs)

        return super().submit(counted)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    for file in sorted(TRACE_FILTER.glob("*.json.gz")):
        shutil.copy(file, folder / file.name)
    in_job_of(gpu_rank(2, {"compute": 400}), TRACE_FILTER / "sampled_rank-0.json.gz",
              128).write(folder / "rank2.json")
    (folder / "settings.json").write_text('{"lr": 0.1}')
    return folder


def analysed(folder, **how):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainprof.analyze(folder, **how)
    return to_json_bytes(result), [str(w.message) for w in caught]


@pytest.mark.parametrize("pool", [ThreadPoolExecutor, ProcessPoolExecutor])
def test_an_executor_gives_the_local_result(job, pool):
    local = analysed(job, workers=1)
    with pool(2) as executor:
        assert analysed(job, executor=executor) == local
    assert any("settings.json" in w for w in local[1])


def test_progress_counts_ranks_done(job):
    seen = []
    with ThreadPoolExecutor(2) as executor, pytest.warns(UserWarning, match="settings.json"):
        trainprof.analyze(job, executor=executor, progress=lambda i, n, f: seen.append((i, n)))
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    assert [i for i, _ in seen] == list(range(5))


def test_the_first_error_stops_the_tasks_not_started(tmp_path):
    (tmp_path / "rank00.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X",'))
    for rank in range(1, 12):
        gpu_rank(rank).write(tmp_path / f"rank{rank:02}.json")
    files = sorted(tmp_path.iterdir())
    with pytest.raises(TraceError) as serial:
        analyze_files(files, workers=1)
    with CountingPool(1) as executor, pytest.raises(TraceError) as remote:
        analyze_files(files, executor=executor)
    assert str(remote.value) == str(serial.value) and "rank00.json.gz" in str(serial.value)
    assert executor.started < len(files)  # the tasks queued behind the error never ran


def test_ctrl_c_cancels_the_tasks_not_started(tmp_path):
    for rank in range(12):
        gpu_rank(rank).write(tmp_path / f"rank{rank:02}.json")

    def interrupt(done, total, file):
        if done == 1:
            raise KeyboardInterrupt

    with CountingPool(1) as executor, pytest.raises(KeyboardInterrupt):
        analyze_files(sorted(tmp_path.iterdir()), progress=interrupt, executor=executor)
    assert executor.started < 12
