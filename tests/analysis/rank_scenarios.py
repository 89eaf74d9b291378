"""Synthetic GPU ranks of one job, each late for one known cause (shared by the straggler,
rank-table, parallel and cluster-summary tests)."""

from __future__ import annotations

from pathlib import Path

from helpers.tracegen import TraceBuilder

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


def in_job_of(b: TraceBuilder, real: Path, world_size: int) -> TraceBuilder:
    """``b`` made a rank of the job ``real`` (a trace file) belongs to: its world size, and its
    events moved to start when ``real``'s recording starts (a folder of traces that cannot be
    one job is refused: analysis/job/one_job.py)."""
    from trainprof.trace.load import load_file

    shift = load_file(real).t0_us - min(e["ts"] for e in b.events if "ts" in e)
    for event in b.events:
        if "ts" in event:
            event["ts"] += shift
    b.metadata.setdefault("distributedInfo", {})["world_size"] = world_size
    return b
