"""The parallelism section on synthetic GPU traces in Kineto's format (the names torch 2.13
writes: ``PP:1F0`` micro-batch ranges from torch.distributed.pipelining's multi-stage schedules,
``c10d::send``/``c10d::recv_``, ``ncclDevKernel_SendRecv`` kernels, DTensor's
``_c10d_functional::all_reduce``, ``c10d::alltoall_base_``, DDP's
``DistributedDataParallel.forward``), and on two real traces of the shared set."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.diagnose.engine import diagnose

from helpers.paths import NCCL_TRACE, NSYS_H100, TRACE_FILTER
from helpers.tracegen import TraceBuilder

#: Per step (1 ms): a stage's compute kernel runs from 100 µs for COMPUTE[stage] µs; its
#: SendRecv kernel runs from 300 to 700 µs on another stream.
COMPUTE = {0: 200.0, 1: 800.0}
MICRO = 2


def stage_trace(rank: int) -> TraceBuilder:
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    for n in range(3):
        t = n * 1000.0
        b.step(n, t, 1000)
        for mb in range(MICRO):
            b.annotation(f"PP:{rank}F{mb}", t + 10 + 40 * mb, 30)
            b.annotation(f"PP:{rank}B{mb}", t + 500 + 40 * mb, 30)
        p2p = "c10d::send" if rank == 0 else "c10d::recv_"
        b.op(p2p, t + 15, 5)  # inside forward micro-batch 0
        b.launch(t + 20, 5, name="sm90_xmma_gemm_bf16bf16_bf16f32", k_ts=t + 100,
                 k_dur=COMPUTE[rank])
        b.stream = 8
        b.launch(t + 30, 5, name="ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
                 k_ts=t + 300, k_dur=400)
        b.stream = 7
    return b


def test_a_gpu_pipeline_from_its_kernels(tmp_path):
    for rank in (0, 1):
        stage_trace(rank).write(tmp_path / f"rank{rank}.json")
    analysis = trainprof.analyze(tmp_path)
    for r in analysis.ranks:
        p = r.sections.parallelism
        pipe = p.pipeline
        assert p.kinds == ["pipeline"] and pipe.stage == r.rank
        assert (pipe.micro_batches, pipe.schedule) == (MICRO, "GPipe")
        assert pipe.role == ("first" if r.rank == 0 else "last")
        # Compute: the GEMM; waiting: the SendRecv kernel outside it.
        c = COMPUTE[r.rank]
        waiting = 400.0 - max(0.0, min(100.0 + c, 700.0) - 300.0)
        assert [s.compute_ms * 1000 for s in pipe.per_step] == pytest.approx([c] * 3)
        assert [s.p2p_exposed_ms * 1000 for s in pipe.per_step] == pytest.approx([waiting] * 3)
        # Warm-up until F0 ends (40 µs), cool-down from B1's start (540 µs): the waiting
        # [300, 700) of stage 0 is 240 µs steady and 160 µs cool-down.
        phases = {0: (0.0, 240.0, 160.0), 1: (0.0, 0.0, 0.0)}[r.rank]
        for s in pipe.per_step:
            assert (s.warmup_wait_ms * 1000, s.steady_wait_ms * 1000,
                    s.cooldown_wait_ms * 1000) == pytest.approx(phases)
    pipe = analysis.job.pipeline
    assert pipe.heaviest.rank == 1
    assert pipe.ideal_bubble_pct == pytest.approx(100 / 3)
    mean = sum(COMPUTE.values()) / 2
    assert pipe.imbalance_saving_ms == pytest.approx((MICRO + 1) / MICRO * (800 - mean) / 1000)
    found = {f.id: f for f in diagnose(analysis)}
    assert found["pipeline_imbalance"].rank == 1
    assert found["pipeline_bubble"].saving_ms == pytest.approx(1 / MICRO * 0.8)


@pytest.mark.parametrize(("names", "kinds"), [
    (["_c10d_functional::all_reduce", "_c10d_functional::wait_tensor"], ["tensor"]),
    (["c10d::alltoall_base_"], ["expert"]),
    (["DistributedDataParallel.forward"], ["ddp"]),
    (["FSDP::pre_forward (layers.0)", "c10d::_allgather_base_"], ["fsdp"]),
    (["aten::mm"], []),
])
def test_each_kind_from_its_names(tmp_path, names, kinds):
    b = TraceBuilder()
    b.step(0, 0, 1000)
    for i, name in enumerate(names):
        if name.startswith(("DistributedDataParallel", "FSDP::")):
            b.annotation(name, 100 + 100 * i, 50)
        else:
            b.op(name, 100 + 100 * i, 50)
    b.write(tmp_path / "rank0.json")
    p = trainprof.analyze(tmp_path / "rank0.json").ranks[0].sections.parallelism
    assert p.kinds == kinds, p.evidence


def test_real_traces():
    """The 2xA100 DDP trace, and two sampled ranks of a job with DDP and all-to-all."""
    ddp = trainprof.analyze(NCCL_TRACE).ranks[0].sections.parallelism
    assert ddp.kinds == ["ddp"] and ddp.calls["all_reduce"] == 15
    for r in trainprof.analyze(TRACE_FILTER).ranks:
        p = r.sections.parallelism
        assert p.kinds == ["expert", "ddp"]
        assert p.calls == {"all_gather": 2, "all_reduce": 4, "all_to_all": 4}


def test_the_h100_fsdp_export_has_no_fsdp_collectives():
    """The 2xH100 FSDP2 nsys export holds FSDP::pre_forward/post_forward ranges only: no
    FSDP::all_gather range and no NCCL kernel (each process shards over itself: FSDP2 issues
    no all-gather for one rank), so there is no prefetch distance and nothing serialised."""
    for r in trainprof.analyze(NSYS_H100).ranks:
        p = r.sections.parallelism
        assert p.kinds == ["fsdp"] and p.calls == {} and p.layers == []
        assert p.fsdp_queues is not None and p.fsdp_queues.serialised is None
        assert p.to_dict()["fsdp_collectives"]["queues"] == 0


AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def test_fsdp_layers_on_a_gpu_by_the_range_that_launched_each_kernel(tmp_path):
    """The host runs ahead: layer 0's all-gather runs on the device at 100-300 µs, long after
    its FSDP::pre_forward range ended, and no compute runs beside it; layer 1's forward
    all-gather (300-400) hides under layer 0's GEMM (300-500); its backward all-gather
    (610-660, launched inside FSDP::pre_backward) and its reduce-scatter (760-860) run
    alone."""
    b = TraceBuilder()
    b.step(0, 0, 1000)

    def comm(name: str, at: float, k_ts: float, k_dur: float) -> None:
        b.stream = 8
        b.launch(at, 2, name=name, k_ts=k_ts, k_dur=k_dur)
        b.stream = 7

    for layer, t0, k_ts, k_dur in ((0, 10, 100, 200), (1, 50, 300, 100)):
        b.annotation(f"FSDP::pre_forward (layers.{layer})", t0, 30)
        b.annotation(f"FSDP::all_gather (layers.{layer})", t0 + 2, 20)
        comm(AG, t0 + 5, k_ts, k_dur)
    b.launch(45, 2, name=GEMM, k_ts=300, k_dur=200)
    b.launch(85, 2, name=GEMM, k_ts=500, k_dur=100)
    b.annotation("FSDP::pre_backward (layers.1)", 600, 50)
    b.annotation("FSDP::all_gather (layers.1)", 605, 20)
    comm(AG, 608, 610, 50)
    b.launch(640, 2, name=GEMM, k_ts=660, k_dur=100)
    b.annotation("FSDP::post_backward_reduce (layers.1)", 700, 20)
    comm(RS, 705, 760, 100)
    b.write(tmp_path / "rank0.json")
    p = trainprof.analyze(tmp_path / "rank0.json").ranks[0].sections.parallelism
    assert p.kinds == ["fsdp"]
    # One step: the figures per step are the totals, in ms.
    got = {x.layer: (x.forward_gather_ms, x.backward_gather_ms, x.reduce_scatter_ms,
                     x.gathers_per_step) for x in p.layers}
    assert got == {"layers.0": pytest.approx((0.2, 0.0, 0.0, 1)),
                   "layers.1": pytest.approx((0.0, 0.05, 0.1, 2))}


def test_fsdp_prefetch_and_serialisation_on_a_gpu(tmp_path):
    """FSDP2's explicit forward prefetch as its ranges nest (torch 2.13's
    _fsdp_param_group.py: ``FSDP::forward_prefetch for L`` after the pre_forward of the layer
    before, holding ``FSDP::all_gather (L)``): layer 1 is gathered one layer ahead, layer 0 when
    it is needed. Its kernels run on stream 8 and the reduce-scatter on stream 9, overlapping
    layer 1's all-gather for 40 of its 100 µs: not serialised; on one stream they would be."""
    def build(rs_stream: int, path) -> object:
        b = TraceBuilder()
        b.step(0, 0, 1000)

        def comm(name: str, at: float, k_ts: float, k_dur: float, stream: int = 8) -> None:
            b.stream = stream
            b.launch(at, 2, name=name, k_ts=k_ts, k_dur=k_dur)
            b.stream = 7

        b.annotation("FSDP::pre_forward (layers.0)", 10, 30)
        b.annotation("FSDP::all_gather (layers.0)", 12, 20)
        comm(AG, 15, 100, 100)
        b.annotation("FSDP::forward_prefetch for layers.1", 45, 10)
        b.annotation("FSDP::all_gather (layers.1)", 46, 8)
        comm(AG, 48, 300, 100)
        b.launch(60, 2, name=GEMM, k_ts=200, k_dur=100)
        b.annotation("FSDP::post_forward (layers.0)", 70, 5)
        b.annotation("FSDP::pre_forward (layers.1)", 80, 10)
        b.launch(95, 2, name=GEMM, k_ts=400, k_dur=100)
        b.annotation("FSDP::post_forward (layers.1)", 100, 5)
        b.annotation("FSDP::post_backward_reduce (layers.0)", 700, 20)
        comm(RS, 705, 360, 100, stream=rs_stream)
        b.write(path)
        return trainprof.analyze(path).ranks[0].sections.parallelism

    p = build(9, tmp_path / "apart.json")
    layers = {x.layer: x for x in p.layers}
    assert (layers["layers.0"].forward_distances, layers["layers.1"].forward_distances) == \
        ([0], [1])
    assert layers["layers.1"].prefetched and not layers["layers.0"].prefetched
    # The prefetched all-gather is layer 1's, in forward: its 100 µs with no GEMM beside it
    # from 300 to 400 (the first GEMM ends at 300, the second starts at 400).
    assert layers["layers.1"].forward_gather_ms == pytest.approx(0.1)  # one step
    q = p.fsdp_queues
    assert q.gather_queues == {(0, 8)} and q.reduce_queues == {(0, 9)}
    assert (q.queues, q.shared_queues) == (2, 0)
    assert (q.gather_ms, q.reduce_ms, q.overlap_ms) == pytest.approx((0.2, 0.1, 0.04))
    assert q.serialised is False
    one = build(8, tmp_path / "one.json").fsdp_queues
    assert one.reduce_queues == {(0, 8)}
