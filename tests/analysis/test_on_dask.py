"""Ranks analysed on a real Dask cluster (a scheduler and two workers on 127.0.0.1): the same
result as a local run, a worker killed mid-run loses and doubles nothing, and a scheduler that
cannot be reached is one sentence and exit 2."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import time
import warnings

import pytest

import trainprof
from trainprof.analysis.parallel.on_dask import dask_executor
from trainprof.cli import main
from trainprof.report.json import to_json_bytes

from dask_processes import dask_cluster, free_port
from helpers.parallel_recordings import parallel_jobs  # noqa: F401 (a fixture)
from helpers.paths import NCCL_TRACE, TRACE_FILTER
from rank_scenarios import gpu_rank, in_job_of

pytest.importorskip("distributed")


def ranks_of_one_trace(folder, count):
    """``count`` copies of the A100 DDP trace, each with its own rank."""
    data = json.loads(gzip.decompress(NCCL_TRACE.read_bytes()))
    for rank in range(count):
        data["distributedInfo"].update(rank=rank, world_size=count)
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(data).encode(), 1))


def analysed(folder, **how):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainprof.analyze(folder, **how)
    return to_json_bytes(result), [str(w.message) for w in caught]


@pytest.mark.slow
def test_a_dask_cluster_gives_the_local_result(tmp_path, parallel_jobs):  # noqa: F811
    job = tmp_path / "job"
    job.mkdir()
    for file in sorted(TRACE_FILTER.glob("*.json.gz")):
        shutil.copy(file, job / file.name)
    like = TRACE_FILTER / "sampled_rank-0.json.gz"  # one job: its world size and start
    in_job_of(gpu_rank(2, {"compute": 400}), like, 128).write(job / "rank2.json")
    in_job_of(gpu_rank(3), like, 128).write(job / "rank3.json")
    (job / "settings.json").write_text('{"lr": 0.1}')
    local, local_warnings = analysed(job, workers=1)
    pipeline = parallel_jobs / "pipeline_heavy"  # a recorded job with job-level parallel figures
    pipeline_local, _ = analysed(pipeline, workers=1)
    seen = []
    with dask_cluster(tmp_path) as cluster:
        with dask_executor(cluster.address) as executor:
            remote, remote_warnings = analysed(job, executor=executor,
                                               progress=lambda i, n, f: seen.append((i, n)))
            pipeline_remote, _ = analysed(pipeline, executor=executor)
        assert pipeline_remote == pipeline_local
        assert json.loads(pipeline_local)["job"]["pipeline"]["stages"]
        with pytest.warns(UserWarning, match="settings.json"):
            by_file = main(["analyze", str(job), "--scheduler-file", str(cluster.scheduler_file),
                            "--format", "json", "-o", str(tmp_path / "by_file.json")])
        with pytest.warns(UserWarning, match="settings.json"):
            by_address = main(["analyze", str(job), "--scheduler", cluster.address, "--format",
                               "json", "-o", str(tmp_path / "by_address.json")])
    with pytest.warns(UserWarning, match="settings.json"):
        assert main(["analyze", str(job), "--jobs", "1", "--format", "json", "-o",
                     str(tmp_path / "local.json")]) == 0
    assert by_file == by_address == 0
    assert ((tmp_path / "by_file.json").read_bytes() == (tmp_path / "by_address.json").read_bytes()
            == (tmp_path / "local.json").read_bytes())
    assert remote == local
    assert remote_warnings == local_warnings and any("settings.json" in w
                                                      for w in local_warnings)
    assert [n for _, n in seen] == [5] * len(seen) and sorted({i for i, _ in seen}) == [
        0, 1, 2, 3, 4, 5]


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_and_doubles_nothing(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    ranks_of_one_trace(job, 8)
    local, _ = analysed(job, workers=1)
    killed = []
    with dask_cluster(tmp_path) as cluster, dask_executor(cluster.address) as executor:
        client = executor._client  # the Dask client behind the executor
        pids = client.run(os.getpid)  # each worker's process, by its address
        ours = {p.pid for p in cluster.workers}
        assert set(pids.values()) == ours  # kill only what this test started

        def kill_a_busy_worker(done, total, file):
            if killed or done == 0:
                return
            busy = {address: tasks for address, tasks in client.processing().items() if tasks}
            for address in busy:
                pid = pids[address]
                if pid in ours:
                    os.kill(pid, signal.SIGKILL)
                    killed.append((address, len(busy[address])))
                    return

        started = time.monotonic()
        remote, _ = analysed(job, executor=executor, progress=kill_a_busy_worker)
        assert time.monotonic() - started < 120
    assert killed and killed[0][1] >= 1  # a worker died with work in hand
    assert remote == local
    assert [r["rank"] for r in json.loads(remote)["ranks"]] == list(range(8))


def test_an_unreachable_scheduler_is_one_sentence_and_exit_2(tmp_path, capsys):
    started = time.monotonic()
    code = main(["analyze", str(TRACE_FILTER), "--scheduler", f"tcp://127.0.0.1:{free_port()}",
                 "--scheduler-timeout", "1"])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - started < 30
    assert err.count("\n") == 1 and "Could not reach the Dask scheduler" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("content", "says"), [
    (None, "does not exist"), ("not json", "is not a Dask scheduler file"),
    ('{"id": 1}', "names no address"), ('{"address": "localhost"}', "is not a Dask scheduler address"),
])
def test_a_bad_scheduler_file_is_one_sentence_and_exit_2(tmp_path, capsys, content, says):
    path = tmp_path / "scheduler.json"
    if content is not None:
        path.write_text(content)
    code = main(["analyze", str(TRACE_FILTER), "--scheduler-file", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err


def test_jobs_with_a_scheduler_is_one_sentence_and_exit_2(capsys):
    code = main(["analyze", str(TRACE_FILTER), "--scheduler", "tcp://127.0.0.1:8786",
                 "--jobs", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "give one or the other" in err
