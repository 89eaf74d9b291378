"""Output that contradicted itself (issue: "Output that contradicts itself"), each made
impossible: collective time past the step and NCCL advice for a gloo CPU job; a low_occupancy
card with a saving that "does not shorten a step" and memory that "allows it" while unknown;
"No major bottleneck" on a step of CUDA API calls; a straggler marked fastest; full cards for
findings that save nothing."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import trainprof
from trainprof.analysis.job.rank_table import RankRow, RankTable, mark_straggler
from trainprof.report.terminal.report import print_analysis

from helpers.paths import TIMESFORMER
from helpers.tracegen import TraceBuilder

GB = 1_000_000_000
DEVICE = {"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 40 * GB, "computeMajor": 8,
          "computeMinor": 0, "numSms": 108}


def _gloo_job(tmp_path, gpu: bool, backend: str = "gloo", ddp: bool = True):
    """Two ranks, three 10 ms steps: 1 ms of compute, then two all_reduce calls on two threads
    that overlap (8 ms each, [1.5, 9.5) and [1.0, 9.0) ms): their durations add up to 16 ms per
    10 ms step, their union is 8.5 ms. With ``ddp``, the compute runs inside DDP's forward
    range (``DistributedDataParallel.forward``, as torch's DDP records it), so the job is DDP
    and gets DDP's advice."""
    for rank in range(2):
        b = TraceBuilder()
        b.metadata["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": 2}
        if gpu:
            b.metadata["deviceProperties"] = [DEVICE]
        for n in range(3):
            t = n * 10_000
            b.step(n, t, 10_000)
            if ddp:
                b.op("DistributedDataParallel.forward", t + 5, 950)
            if gpu:
                b.launch(t + 10, 5, k_ts=t + 20, k_dur=900, name="volta_sgemm_128x64_nn")
            else:
                b.op("aten::mm", t + 10, 900)
            b.op(f"{backend}:all_reduce", t + 1_500, 8_000)
            b.op(f"{backend}:all_reduce", t + 1_000, 8_000, tid=200)
        b.write(tmp_path / f"rank{rank}.json")
    return trainprof.analyze(tmp_path)


def test_gloo_cpu_job_collective_time_within_the_step_and_no_nccl_advice(tmp_path):
    a = _gloo_job(tmp_path, gpu=False)
    comm = a.ranks[0].sections.communication
    row = comm.types[0].to_dict()
    assert row["time_ms_per_step"] == pytest.approx(16.0)  # the sum of durations, documented
    assert row["busy_ms_per_step"] == pytest.approx(8.5)  # the union: what the table shows
    f = next(f for f in a.findings if f.id == "communication_exposed")
    shown = next(e for e in f.evidence if e.what == "all_reduce")
    assert "8.5 ms/step" in shown.where
    fix = " ".join([f.fix.summary, f.fix.pytorch, f.fix.accelerate])
    assert "NCCL" not in fix and "GPU" not in fix and "bf16_compress_hook" in fix


@pytest.mark.parametrize(("backend", "advice"), [("gloo", True), ("nccl", False)])
def test_gpu_job_gets_nccl_advice_only_over_gloo(tmp_path, backend, advice):
    a = _gloo_job(tmp_path, gpu=True, backend=backend)
    f = next(f for f in a.findings if f.id == "communication_exposed")
    assert ("NCCL instead of gloo" in f.fix.summary) is advice


def test_all_reduces_outside_ddp_get_no_ddp_advice(tmp_path):
    """The same all-reduces issued by hand (no DDP range, none in backward): no bucket_cap_mb,
    no_sync or communication hook, the generic advice instead."""
    a = _gloo_job(tmp_path, gpu=False, ddp=False)
    assert a.ranks[0].sections.parallelism.kinds == []
    f = next(f for f in a.findings if f.id == "communication_exposed")
    fix = " ".join([f.fix.summary, f.fix.pytorch, f.fix.accelerate])
    assert not any(w in fix for w in ("DDP", "bucket", "no_sync", "comm_hook")), fix
    assert "async_op=True" in fix


def test_low_occupancy_card_agrees_with_itself(tmp_path):
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [DEVICE]
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 5, 5, k_ts=t + 10, k_dur=900, name="sm80_xmma_gemm_bf16",
                 args={"blocks per SM": 0.25, "est. achieved occupancy %": 10})
    a = trainprof.analyze(b.write(tmp_path / "t.json"))
    f = next(f for f in a.findings if f.id == "low_occupancy")
    assert f.saving_pct > 0
    card = " ".join([f.title, f.explanation, f.saving_assumption, f.fix.summary])
    assert "does not shorten" not in card
    assert "peak memory of the device: unknown" in [str(e).split(" (")[0] for e in f.evidence]
    assert "memory allows it" not in card and "no memory figures" in f.fix.summary
    # With memory figures (peak 20% of the device) the fix says the memory allows it.
    for n in range(3):
        b.memory(n * 1000 + 50, int(8 * GB) if n == 0 else 0, int(8 * GB))
    (tmp_path / "m").mkdir()
    a = trainprof.analyze(b.write(tmp_path / "m" / "t.json"))
    f = next(f for f in a.findings if f.id == "low_occupancy")
    assert "The memory allows it: the peak is 20% of the device" in f.fix.summary


def test_a_step_of_cuda_api_calls_is_not_no_bottleneck(tmp_path):
    """Three 10 ms steps, each 9.87 ms of cudaLaunchKernel calls whose kernels the trace lacks
    (98.7% Runtime in the breakdown)."""
    b = TraceBuilder()
    for n in range(3):
        b.step(n, n * 10_000, 10_000)
        b.event("cuda_runtime", "cudaLaunchKernel", n * 10_000 + 50, 9_870,
                {"correlation": 5000 + n})
    a = trainprof.analyze(b.write(tmp_path / "t.json"))
    assert a.ranks[0].breakdown_pct["runtime"] == pytest.approx(98.7)
    f = a.findings[0]
    assert f.id == "cuda_api_time" and f.saving_pct == pytest.approx(98.7)
    assert "ProfilerActivity.CUDA" in f.fix.pytorch
    console = Console(record=True, width=100, file=io.StringIO())
    print_analysis(a, console)
    assert "No major bottleneck" not in console.export_text()


def _row(rank: int, step_ms: float, mark: str = "") -> RankRow:
    return RankRow(rank=rank, windows=1, steps=3, step_ms=step_ms, phases_ms={}, comm_ms=None,
                   exposed_comm_ms=None, idle_pct=None, idle_of="GPU", mark=mark)


def test_a_straggler_is_never_marked_fastest():
    table = RankTable([_row(0, 10.0, "fastest"), _row(1, 12.0, "slowest"), _row(2, 11.0)],
                      slowest=1, fastest=0)
    mark_straggler(table, straggler=0)
    assert [r.mark for r in table.rows] == ["", "slowest", ""] and table.fastest is None
    other = RankTable([_row(0, 10.0, "fastest"), _row(1, 12.0, "slowest")], 1, 0)
    mark_straggler(other, straggler=1)  # slowest and straggler agree: both stay
    assert [r.mark for r in other.rows] == ["fastest", "slowest"] and other.fastest == 0


def test_findings_that_save_nothing_are_folded_to_one_line():
    a = trainprof.analyze(TIMESFORMER)
    minor = [f for f in a.findings if f.saving_pct < 0.5 and f.severity != "high"]
    assert minor, [(f.id, f.saving_pct) for f in a.findings]
    console = Console(record=True, width=200, file=io.StringIO())
    print_analysis(a, console)
    text = console.export_text()
    folded = text[text.index("Also seen, saving under 0.5% of a step:"):]
    for f in minor:
        assert f.title in folded
        assert f"{f.title} · rank 0 · saves" not in text  # no full card head
    top = a.findings[0]
    assert f"saves ~{top.saving_pct:.0f}%" in text[:text.index("Also seen")]


def test_waits_in_collectives_running_at_once_count_once(tmp_path):
    """Two ranks, three 10 ms steps, two all_reduce calls per step on two threads, all ending at
    9.5 ms. Rank 0 enters them at 1.0 and 1.5 ms, rank 1 (late) at 6.0 and 6.5 ms: rank 0
    waits 5 ms in each, over [1.0, 6.0) and [1.5, 6.5): 5.5 ms per step, not 10."""
    for rank, late in ((0, 0), (1, 5_000)):
        b = TraceBuilder()
        b.metadata["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        for n in range(3):
            t = n * 10_000
            b.step(n, t, 10_000)
            b.op("aten::mm", t + 10, 900 + late)
            b.op("gloo:all_reduce", t + 1_000 + late, 8_500 - late)
            b.op("gloo:all_reduce", t + 1_500 + late, 8_000 - late, tid=200)
        b.write(tmp_path / f"rank{rank}.json")
    a = trainprof.analyze(tmp_path)
    waits = {w.rank: w for w in a.job.stragglers.ranks}
    assert waits[0].waited_ms_per_step == pytest.approx(5.5)
    assert waits[1].caused_wait_ms_per_step == pytest.approx(5.5)
    assert waits[1].waited_ms_per_step == pytest.approx(0.0)
