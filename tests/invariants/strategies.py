"""Hypothesis strategies that build Kineto traces: random steps, nested ops, kernels on several
streams, copies, collectives (NCCL kernels or gloo host ops), data loading, optimizer steps,
compile ranges, memory events, CUDA API calls with no kernel, one to three ranks, and odd
values (zero durations, work past a step's end, kernels that start before their launch ends).

``job(draw)`` returns one ``TraceBuilder`` per rank; write them with ``write_job``."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from helpers.tracegen import NEW, OLD, TraceBuilder

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
KERNELS = ("volta_sgemm_128x64_nn", "void at::native::vectorized_elementwise_kernel<4>",
           "triton_poi_fused_add_0", "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
           "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "softmax_warp_forward")
OPS = ("aten::mm", "aten::add", "aten::linear", "aten::to", "aten::copy_", "aten::softmax")
HOST_COLLECTIVES = ("gloo:all_reduce", "nccl:all_reduce", "c10d::allreduce_", "gloo:broadcast")
COMPILE = ("entire_frame_compile", "compile_fx_inner (dynamo_timed)", "inductor_compile")

durations = st.one_of(st.just(0.0), st.floats(0.001, 5.0), st.floats(5.0, 3000.0))


@st.composite
def _step_events(draw, b: TraceBuilder, t0: float, dur: float, gpu: bool) -> None:
    """The events of one step starting at t0 (µs) lasting dur (µs)."""
    at = st.floats(t0, t0 + dur * 1.1)  # may start after the step ends (odd, allowed)
    for _ in range(draw(st.integers(0, 5))):
        start, length = draw(at), draw(durations)
        b.op(draw(st.sampled_from(OPS)), start, length)
        if draw(st.booleans()):  # a nested child, sometimes longer than its parent
            b.op(draw(st.sampled_from(OPS)), start + length * draw(st.floats(0, 0.5)),
                 length * draw(st.floats(0, 1.2)))
    if draw(st.booleans()):
        b.op(LOADER, t0, draw(durations))
    if draw(st.booleans()):
        b.annotation("Optimizer.step#SGD.step", draw(at), draw(durations))
    if draw(st.integers(0, 4)) == 0:
        start = draw(at)
        b.op(draw(st.sampled_from(COMPILE)), start, draw(durations))
        if draw(st.booleans()):
            b.op(f"Torch-Compiled Region: 0/{draw(st.integers(0, 3))}", start + 1, 1.0)
    if draw(st.integers(0, 3)) == 0:
        b.op(draw(st.sampled_from(HOST_COLLECTIVES)), draw(at), draw(durations),
             tid=draw(st.sampled_from([None, 200])))
    if draw(st.integers(0, 4)) == 0:
        b.event(b.spelling["runtime"], draw(st.sampled_from(["cudaMalloc", "cudaLaunchKernel",
                                                             "cudaStreamSynchronize"])),
                draw(at), draw(durations), {"correlation": 900_000 + int(draw(at))})
    if not gpu:
        return
    for _ in range(draw(st.integers(0, 6))):
        b.stream = draw(st.sampled_from([7, 13, 20]))
        kind = draw(st.sampled_from(["kernel", "kernel", "kernel", "memcpy", "memset"]))
        start = draw(at)
        launch = draw(st.floats(0.5, 50.0))
        k_ts = start + draw(st.floats(-launch, 500.0))  # may start before its launch ends
        args = {}
        if kind == "kernel" and draw(st.booleans()):
            args = {"blocks per SM": draw(st.floats(0.01, 8.0)),
                    "est. achieved occupancy %": draw(st.integers(0, 100)),
                    "grid": [draw(st.integers(1, 512)), 1, 1], "block": [128, 1, 1]}
        if kind == "memcpy":
            args = {"bytes": draw(st.integers(0, 1 << 28)), "memory bandwidth (GB/s)": 10.0}
        b.launch(start, launch, kind=kind, name=draw(st.sampled_from(KERNELS)), k_ts=k_ts,
                 k_dur=draw(durations), args=args,
                 launcher="cudaMemcpyAsync" if kind == "memcpy" else "cudaLaunchKernel")
    b.stream = 7


@st.composite
def job(draw) -> list[TraceBuilder]:
    """One to three ranks of one job, each with one to four steps."""
    ranks = draw(st.integers(1, 3))
    gpu = draw(st.booleans())
    backend = draw(st.sampled_from(["nccl", "gloo", None]))
    spelling = draw(st.sampled_from([NEW, OLD]))
    steps = draw(st.integers(1, 4))
    out = []
    for rank in range(ranks):
        b = TraceBuilder(spelling=dict(spelling))
        if backend is not None and ranks > 1:
            b.metadata["distributedInfo"] = {"backend": backend, "rank": rank,
                                             "world_size": ranks}
        if gpu and draw(st.booleans()):
            b.metadata["deviceProperties"] = [{
                "id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_000_000_000,
                "computeMajor": 8, "computeMinor": 0, "numSms": 108}]
        t = draw(st.floats(0.0, 100.0))
        allocated = 0
        for n in range(steps):
            dur = draw(st.floats(50.0, 20_000.0))
            b.step(n, t, dur)
            draw(_step_events(b, t, dur, gpu))
            for _ in range(draw(st.integers(0, 3))):
                change = draw(st.integers(-allocated, 1 << 26))
                allocated += change
                b.memory(draw(st.floats(t, t + dur)), change, allocated,
                         device_type=1 if gpu else 0,
                         reserved=allocated + draw(st.integers(0, 1 << 24)))
            t += dur + draw(st.one_of(st.just(0.0), st.floats(0.0, 2000.0)))
        b.events.sort(key=lambda e: e.get("ts", 0))  # memory events appended out of order
        out.append(b)
    return out


def write_job(builders: list[TraceBuilder], folder: Path) -> Path:
    """One file per rank in ``folder`` (the folder is the job); a lone rank is its file."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [b.write(folder / f"rank{i}.json") for i, b in enumerate(builders)]
    return paths[0] if len(paths) == 1 else folder
