"""What makes the straggler late: synthetic GPU ranks, each with one known cause."""

from __future__ import annotations

import pytest

import trainprof

from tracegen import TraceBuilder

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def gpu_rank(rank: int, extra: dict[str, float] | None = None) -> TraceBuilder:
    """Three 1 ms steps: a 200 µs kernel, then one all_reduce. An on-time rank starts it at
    300 µs and waits in it until 800 µs. A late rank does 400 µs more work first (``extra``,
    µs per cause: data loading, compute as a longer kernel, host work with the GPU idle) and
    starts it at 700 µs, 100 µs long."""
    extra = extra or {}
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 3}
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        kernel_end = 220 + extra.get("compute", 0)
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=kernel_end - 20, name="volta_sgemm_128x64_nn")
        at = t + max(kernel_end, 250)
        if extra.get("data loading"):
            b.op(LOADER, at, extra["data loading"])
            at += extra["data loading"]
        if extra.get("host"):
            b.op("aten::to", at, extra["host"])  # host work while the GPU has nothing to do
        start, dur = (t + 700, 100) if extra else (t + 300, 500)
        b.op("c10d::allreduce_", start - 20, 15)
        b.stream = 8
        b.launch(start - 15, 5, k_ts=start, k_dur=dur,
                 name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        b.stream = 7
    return b


@pytest.mark.parametrize("cause", ["data loading", "compute", "host"])
def test_the_straggler_is_named_with_its_cause(tmp_path, cause):
    gpu_rank(0).write(tmp_path / "rank0.json")
    gpu_rank(1, {cause: 400}).write(tmp_path / "rank1.json")
    gpu_rank(2).write(tmp_path / "rank2.json")
    analysis = trainprof.analyze(tmp_path)
    job = analysis.job["stragglers"]
    assert job.straggler == 1
    assert job.cause is not None and job.cause.reason == cause
    assert job.cause.excess_ms > 0.2  # at least half the 0.4 ms it makes the others wait
    assert f"the cause is its {cause}" in job.evidence[-1]
    finding = next(f for f in analysis.findings if f.id == "straggler")
    assert f"held back by its {cause}" in finding.title
    assert any(e.what.startswith(f"the cause: its {cause}") for e in finding.evidence)
    assert job.to_dict()["cause"]["reason"] == cause


def test_no_cause_when_no_one_part_explains_the_lateness(tmp_path):
    """Rank 1 is late by a little of everything: no part explains half the wait it causes."""
    gpu_rank(0).write(tmp_path / "rank0.json")
    gpu_rank(1, {"data loading": 150, "compute": 150, "host": 100}).write(tmp_path / "rank1.json")
    gpu_rank(2).write(tmp_path / "rank2.json")
    analysis = trainprof.analyze(tmp_path)
    job = analysis.job["stragglers"]
    assert job.straggler == 1 and job.cause is None
    assert not any("the cause" in e for e in job.evidence)
    finding = next(f for f in analysis.findings if f.id == "straggler")
    assert "held back" not in finding.title
