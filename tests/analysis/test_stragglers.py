"""Stragglers: synthetic ranks with known waits, the shared two-rank traces, a live gloo job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trainprof

from helpers.paths import TRACE_FILTER
from helpers.tracegen import TraceBuilder

JOB = Path(__file__).parent / "jobs" / "gloo_straggler.py"


def rank_trace(rank: int, late: bool, wait: bool) -> TraceBuilder:
    """Three 1 ms steps with one all_reduce each. The late rank starts it at 700 µs and takes
    100 µs; a rank that waits starts it at 300 µs and takes 500 µs (until 800 µs)."""
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=200, name="volta_sgemm_128x64_nn")
        start, dur = (t + 700, 100) if late else (t + 300, 500 if wait else 100)
        b.op("c10d::allreduce_", start - 20, 15)
        b.stream = 8
        b.launch(start - 15, 5, k_ts=start, k_dur=dur,
                 name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        b.stream = 7
    return b


def test_the_late_rank_is_named(tmp_path):
    rank_trace(0, late=False, wait=True).write(tmp_path / "rank0.json")
    rank_trace(1, late=True, wait=False).write(tmp_path / "rank1.json")
    job = trainprof.analyze(tmp_path).job.stragglers
    assert job.straggler == 1
    assert (job.matched, job.matched_steps) == (3, 3)
    r0, r1 = job.ranks
    assert r0.waited_ms_per_step == pytest.approx(0.4) and r1.waited_ms_per_step == 0
    assert (r1.last_arrivals, r1.caused_wait_ms_per_step) == (3, pytest.approx(0.4))
    assert r1.mean_start_lag_ms == pytest.approx(0.4)
    assert "rank 1 arrived last at 3 of 3" in job.evidence[0]
    assert job.to_dict()["straggler"] == 1


def test_balanced_ranks_have_no_straggler(tmp_path):
    rank_trace(0, late=False, wait=False).write(tmp_path / "rank0.json")
    rank_trace(1, late=False, wait=False).write(tmp_path / "rank1.json")
    job = trainprof.analyze(tmp_path).job.stragglers
    assert job.straggler is None and job.matched == 3
    assert job.step_spread_pct == pytest.approx(0.0)


def test_one_rank(tmp_path):
    rank_trace(0, late=False, wait=True).write(tmp_path / "rank0.json")
    job = trainprof.analyze(tmp_path).job.stragglers
    assert job.straggler is None and job.ranks == [] and "One rank" in job.notes[0]


def test_shared_two_rank_traces():
    """Two sampled ranks of a 128-rank job: every collective matches; neither rank causes
    most of the waiting (rank 1 arrives last at 7 of 10, but causes only 54% of the wait)."""
    job = trainprof.analyze(TRACE_FILTER).job.stragglers
    assert [r.rank for r in job.ranks] == [0, 1]
    assert job.matched == 10 and job.matched_steps == 2
    assert job.ranks[1].last_arrivals == 7
    assert job.straggler is None and job.step_spread_pct == pytest.approx(0.67, abs=0.01)
    assert "2 of 128 ranks loaded" in job.notes[0]


@pytest.mark.slow
@pytest.mark.alone  # the slow rank is named by its delay: the other worker's load would blur it
def test_live_gloo_job_names_the_slow_rank(tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node=2", str(JOB), str(tmp_path), "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    analysis = trainprof.analyze(tmp_path)
    job = analysis.job.stragglers
    assert job.straggler == 1, job.notes
    slow, fast = job.ranks[1], job.ranks[0]
    assert fast.waited_ms_per_step > 20 > slow.waited_ms_per_step  # it sleeps 30 ms a step
    assert analysis.ranks[0].sections.communication.source == "host ops"
    assert analysis.ranks[0].sections.communication.types[0].type == "all_reduce"


def test_ranks_without_communication(tmp_path):
    for rank in (0, 1):
        b = TraceBuilder()
        b.metadata["distributedInfo"] = {"rank": rank, "world_size": 2}
        b.step(1, 0, 100 + rank * 10)
        b.op("aten::mm", 10, 50)
        b.write(tmp_path / f"rank{rank}.json")
    job = trainprof.analyze(tmp_path).job.stragglers
    assert job.matched == 0 and job.straggler is None
    assert job.step_spread_pct == pytest.approx(10 / 105 * 100)
    assert [r.waited_ms_per_step for r in job.ranks] == [0, 0]
