"""Cluster summaries in the job: torchrun with gloo on CPU, `trainprof.profile` and `trainprof run`."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainprof
from trainprof.analysis.job.cluster_file import decode_document

from capture_helpers import ddp_script, run_torchrun

JOB = Path(__file__).parent / "jobs" / "cluster_job.py"


def torchrun(ranks: int, *args: str, cwd: Path):
    return run_torchrun([f"--nproc_per_node={ranks}", *args], cwd=cwd, timeout=120,
                        outputs=(cwd / "traces",))


@pytest.mark.slow
@pytest.mark.alone  # the slow rank is named by its delay: the other worker's load would blur it
def test_rank_0_writes_every_rank_and_names_the_slow_one(tmp_path):
    done = torchrun(3, str(JOB), "traces", "slow-data", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "traces"
    doc = decode_document(folder / "cluster_summary.json")
    assert (doc.world_size, doc.complete, doc.failed, doc.missing) == (3, True, [], [])
    assert [s.rank for s in doc.ranks] == [0, 1, 2]
    stragglers = doc.job["stragglers"]
    assert stragglers["straggler"] == 1 and stragglers["cause"]["reason"] == "data loading"
    title = next(f["title"] for f in doc.findings if f["id"] == "straggler")
    assert title.startswith("Rank 1 is a straggler, held back by its data loading")
    # Offline: the folder (traces and summary) has each rank once, and the same view.
    from_traces = trainprof.analyze(folder)
    assert [r.rank for r in from_traces.ranks] == [0, 1, 2]
    from_summary = trainprof.analyze(folder / "cluster_summary.json")
    assert from_summary.job.stragglers.to_dict() == from_traces.job.stragglers.to_dict()
    assert from_summary.job.rank_table.to_dict() == from_traces.job.rank_table.to_dict()


@pytest.mark.slow
def test_a_rank_that_never_arrives_costs_the_timeout_not_a_hang(tmp_path):
    done = torchrun(2, str(JOB), "traces", "no-show", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "did not all meet within 3 s" in done.stderr
    doc = decode_document(tmp_path / "traces" / "cluster_summary.json")
    assert (doc.complete, doc.missing, [s.rank for s in doc.ranks]) == (False, [1], [0])
    assert "the gather failed" in doc.notes[0]


@pytest.mark.slow
def test_ranks_that_record_without_trainprof_skip_the_summary_without_waiting(tmp_path):
    done = torchrun(2, str(JOB), "traces", "rank-0-only", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "not every rank records with trainprof" in done.stderr
    assert "did not all meet" not in done.stderr  # it did not wait for rank 1 to come
    assert not (tmp_path / "traces" / "cluster_summary.json").exists()
    assert [p.name for p in (tmp_path / "traces").iterdir()] == ["rank0.step4.pt.trace.json.gz"]


BREAKS_ITS_TRACE = ddp_script(5, """
    if dist.get_rank() == 1:  # the trace it wrote is damaged: it cannot summarise it
        for path in Path("traces").glob("rank1.*"):
            path.write_bytes(b"not a gzipped trace")
    """)


@pytest.mark.slow
def test_trainprof_run_a_rank_that_fails_to_summarise_is_marked(tmp_path):
    (tmp_path / "ddp.py").write_text(BREAKS_ITS_TRACE)
    done = torchrun(2, "-m", "trainprof", "run", "--out", "traces", "--no-analysis",
                    "--wait", "1", "--warmup", "1", "--active", "2", "--", "ddp.py",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not summarise this rank's traces" in done.stderr
    doc = decode_document(tmp_path / "traces" / "cluster_summary.json")
    assert doc.complete and [s.rank for s in doc.ranks] == [0]
    assert [f.rank for f in doc.failed] == [1] and doc.failed[0].error.split(":")[0] in ("TraceError", "NotATraceError")
