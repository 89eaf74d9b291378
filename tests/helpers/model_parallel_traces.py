"""Kineto traces of GPU tensor- and expert-parallel steps, built event by event.

The format is the one PyTorch 2.x's Kineto writes (as in tests/helpers/critical_path_traces.py: seen in
the H100 traces of ``h100/`` and the HTA test traces): ``ProfilerStep#N`` and ``record_function``
ranges as ``user_annotation``, ``cpu_op`` host ops, ``cuda_runtime`` launches with a
``correlation``, ``kernel`` events with ``device``/``stream``/``correlation`` args and ``ac2g``
flows. The collectives' names are those torch 2.x records: DTensor's functional collective
``_c10d_functional::all_reduce`` (then ``_c10d_functional::wait_tensor``) launching NCCL's
``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)`` (the NCCL 2.19+
kernel name), and DeepEP's ``deep_ep::intranode::dispatch``/``combine`` kernels (their names in
DeepEP's csrc/kernels/intranode.cu, as tests/helpers/critical_path_traces.py writes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.critical_path_traces import H800, Sim, _annotated
from helpers.tracegen import TraceBuilder

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*)"
#: NCCL runs ``all_to_all_single`` as grouped sends and receives: one SendRecv kernel, launched
#: inside ``c10d::alltoall_base_`` (torch 2.x with NCCL 2.19+).
SEND_RECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def tensor_parallel(gemm_us: float, reduce_us: float, steps: int = 3, layers: int = 4,
                    tp: int = 4) -> Sim:
    """A TP rank of an H800: each layer (``layers.i``) runs two GEMMs and then DTensor's
    all-reduce of its output on the compute stream (stream 7), where the next layer waits for
    it; the host runs ahead within the step, so the step's path is the stream, and waits for
    the step's last kernel at its end (the loss read back)."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [H800]
    b.metadata["distributedInfo"] = {
        "backend": "nccl", "rank": 0, "world_size": tp,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": tp,
                       "ranks": list(range(tp))}]}
    sim = Sim(b)
    for n in range(steps):
        sim.step_ops.append([])
        step_at = sim.host
        sim.host += 1.0
        for i in range(layers):
            def layer() -> None:
                for _ in range(2):
                    sim.launch(GEMM, 7, gemm_us / 2, op="aten::mm")
                sim.launch(ALL_REDUCE, 7, reduce_us, op="_c10d_functional::all_reduce")
                b.op("_c10d_functional::wait_tensor", sim.host, 3.0)
                sim.host += 5.0

            _annotated(sim, f"layers.{i}", layer)
        # the loss read back (``loss.item()``): the host waits for the step's last kernel
        last = sim.last[7]
        wait = max(last.end - sim.host, 0.0) + 2.0
        b.event("cuda_runtime", "cudaStreamSynchronize", sim.host, wait, {"correlation": -1})
        sim.host += wait + 1.0
        sim._woke(last)
        b.annotation(f"ProfilerStep#{n}", step_at, sim.host - step_at)
    return sim


@dataclass
class ExpertRank:
    """One expert-parallel rank as built: its all-to-all kernels' and experts' times (µs)."""

    builder: TraceBuilder
    all_to_all: list[tuple[float, float]] = field(default_factory=list)
    compute: list[tuple[float, float]] = field(default_factory=list)
    steps: list[tuple[float, float]] = field(default_factory=list)
    nccl: bool = False  # all_to_all_single over NCCL (SendRecv kernels), else DeepEP


def expert_parallel(loads: list[float], steps: int = 3, chunks: int = 2,
                    transfer_us: float = 300.0, unit_us: float = 1000.0,
                    overlap: bool = False, nccl: bool = False) -> list[ExpertRank]:
    """An H800 expert-parallel job, a trace per rank: each chunk dispatches tokens (DeepEP's
    dispatch kernel on stream 20), runs the experts on stream 7 (``loads[r]`` x ``unit_us``:
    rank r's share of the tokens) and combines them (stream 20). Every all-to-all ends when the
    slowest rank reaches it: a rank with a lighter load waits inside it for the heaviest.
    ``overlap``: DualPipe's pairing, each chunk's dispatch and combine (another micro-batch's
    tokens) on stream 20 while its experts compute on stream 7. ``nccl``: the exchange is
    ``dist.all_to_all_single`` over NCCL, not DeepEP."""
    most = max(loads)
    out = []
    for rank, load in enumerate(loads):
        b = TraceBuilder()
        b.metadata["deviceProperties"] = [H800]
        b.metadata["distributedInfo"] = {"backend": "nccl", "rank": rank,
                                         "world_size": len(loads)}
        er = ExpertRank(b, nccl=nccl)
        t = 0.0  # the device's time; the host launches each kernel 50 µs ahead of it
        for n in range(steps):
            start = t
            for _ in range(chunks):
                wait = (most - load) * unit_us
                if overlap:
                    done = _experts(b, er, t + 100.0, load * unit_us)
                    moved = _all_to_all(b, er, DISPATCH, t, transfer_us)
                    t = max(done, _all_to_all(b, er, COMBINE, moved, transfer_us + wait))
                    continue
                t = _all_to_all(b, er, DISPATCH, t, transfer_us)
                t = _experts(b, er, t, load * unit_us)
                t = _all_to_all(b, er, COMBINE, t, transfer_us + wait)
            b.annotation(f"ProfilerStep#{n}", start - 100.0, t - start + 100.0)
            er.steps.append((start - 100.0, t))
            t += 200.0
        out.append(er)
    return out


def _all_to_all(b: TraceBuilder, er: ExpertRank, kernel: str, t: float, dur: float) -> float:
    """DeepEP's dispatch or combine kernel on stream 20 from ``t``, launched by its op."""
    b.stream = 20
    if er.nccl:
        b.op("c10d::alltoall_base_", t - 60.0, 20.0)
        kernel = SEND_RECV
    else:
        b.op("deep_ep::dispatch" if kernel == DISPATCH else "deep_ep::combine", t - 60.0, 20.0)
    b.launch(t - 58.0, 8.0, name=kernel, k_ts=t, k_dur=dur, flow=True)
    er.all_to_all.append((t, t + dur))
    return t + dur


def _experts(b: TraceBuilder, er: ExpertRank, t: float, dur: float) -> float:
    """The experts' GEMM on stream 7 from ``t``."""
    b.stream = 7
    b.op("aten::mm", t - 60.0, 20.0)
    b.launch(t - 58.0, 8.0, name=GEMM, k_ts=t, k_dur=dur, flow=True)
    er.compute.append((t, t + dur))
    return t + dur
