"""Synthetic traces of today's GPU jobs with known answers (used by several test files)."""

from __future__ import annotations

from helpers.tracegen import TraceBuilder

#: An H800-like device: 132 SMs, Hopper limits.
H800 = {"id": 0, "name": "NVIDIA H800", "totalGlobalMem": 80_000_000_000, "computeMajor": 9,
        "computeMinor": 0, "numSms": 132, "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536,
        "sharedMemPerMultiprocessor": 233472, "warpSize": 32}

#: CUTLASS 3 FP8 grouped GEMM (not named persistent), FlashAttention 3 forward, DeepEP.
FP8_GEMM = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::"
            "GroupProblemShape<cute::tuple<int, int, int>>, cutlass::gemm::collective::"
            "CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<4>>>>(Params)")
FA3_FWD = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
           "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>, 128>>>>(Params)")
DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*, float*)"

STEP_US = 1000.0
COMM_STREAM = 20
COMPUTE_STREAM = 7


def moe_step_trace(with_comm: bool = True, steps: int = 3) -> TraceBuilder:
    """Expert-parallel steps on an H800: per 1000 µs step, DeepEP dispatch [0, 520) and combine
    [520, 980) on 20 SMs of a communication stream, beside a 112-block FP8 grouped GEMM
    [10, 510) and a 132-block FA3 forward [530, 830) on the compute stream.

    Kernel time per step: communication 980 µs, Tensor Core 800 µs. Without the communication
    kernels (``with_comm=False``) the GEMM's 112 blocks leave 20 of the 132 SMs empty."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [H800]
    gemm = {"grid": [112, 1, 1], "block": [384, 1, 1], "registers per thread": 168,
            "shared memory": 200_000}
    fa3 = {"grid": [132, 1, 1], "block": [384, 1, 1], "registers per thread": 128,
           "shared memory": 180_000}
    comm = {"grid": [20, 1, 1], "block": [768, 1, 1], "registers per thread": 64,
            "shared memory": 0}
    for n in range(steps):
        t = n * STEP_US
        b.step(n, t, STEP_US)
        if with_comm:
            b.stream = COMM_STREAM
            b.event("python_function", "deep_ep/buffer.py(310): dispatch", t, 4)
            b.launch(t, 3, name=DISPATCH, k_ts=t, k_dur=520, args=comm)
            b.launch(t + 500, 3, name=COMBINE, k_ts=t + 520, k_dur=460, args=comm)
        b.stream = COMPUTE_STREAM
        b.launch(t + 4, 3, name=FP8_GEMM, k_ts=t + 10, k_dur=500, args=gemm)
        b.launch(t + 510, 3, name=FA3_FWD, k_ts=t + 530, k_dur=300, args=fa3)
    return b


def graph_replay_trace(steps: int = 3, kernels: int = 60) -> TraceBuilder:
    """Per 1000 µs step one ``cudaGraphLaunch`` [5, 20) inside ``aten::forward_graph`` replays
    ``kernels`` back-to-back 14 µs kernels from 30 µs on (one every 15 µs)."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [dict(H800, name="NVIDIA H100 80GB HBM3")]
    for n in range(steps):
        t = n * STEP_US
        b.step(n, t, STEP_US)
        b.op("CUDAGraph.replay", t + 2, 20)
        rt, _ = b.launch(t + 5, 15, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                         k_ts=t + 30, k_dur=14, launcher="cudaGraphLaunch")
        for i in range(1, kernels):
            name = ("triton_poi_fused_add_mul_0" if i % 2 else
                    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n")
            b.kernel(name, t + 30 + 15 * i, 14, correlation=rt["args"]["correlation"])
    return b
