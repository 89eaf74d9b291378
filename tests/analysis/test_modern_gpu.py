"""Today's GPU jobs read right: communication and Tensor Core shares, occupancy beside
communication kernels, CUDA graph replays, and accelerators other than CUDA/ROCm."""

from __future__ import annotations

import numpy as np
import pytest

import trainprof
from trainprof.analysis.sections.occupancy import launch_fill
from trainprof.trace.load import load_file
from trainprof.trace.model import Kind

from helpers.modern_traces import (
    COMBINE,
    DISPATCH,
    FA3_FWD,
    FP8_GEMM,
    graph_replay_trace,
    moe_step_trace,
)
from helpers.tracegen import TraceBuilder


def _analyze(builder, tmp_path, name="trace.json"):
    return trainprof.analyze(builder.write(tmp_path / name))


def test_moe_step_shares(tmp_path):
    r = _analyze(moe_step_trace(), tmp_path).ranks[0]
    classes = r.sections.kernels.classes
    # Per step: communication 520 + 460 µs, Tensor Core 500 + 300 µs, nothing else.
    assert classes.class_us == {"compute": 0, "tensor_core": 2400, "communication": 2940}
    assert classes.class_pct["communication"] == pytest.approx(980 / 1780 * 100)
    assert classes.unclassified_us == 0
    assert r.gpu.tensor_core_pct == pytest.approx(100.0)  # of compute kernel time
    # Communication runs [0, 980) of each 1000 µs step: 98% of the window.
    assert r.timeline.communication_pct == pytest.approx(98.0)
    rows = {row.name: row for row in r.sections.kernels.rows}
    assert {rows[n].kernel_class for n in (DISPATCH, COMBINE)} == {"communication"}
    assert {rows[n].kernel_class for n in (FP8_GEMM, FA3_FWD)} == {"tensor_core"}


def test_persistent_gemm_beside_communication_fills_the_free_sms(tmp_path):
    """112 blocks while DeepEP holds 20 of 132 SMs: every free SM has a block."""
    trace = load_file(moe_step_trace().write(tmp_path / "t.json"))
    ev = trace.events
    gemms = [i for i in range(len(ev)) if ev.kind[i] == Kind.KERNEL
             and ev.names[ev.name[i]] == FP8_GEMM]
    fill = launch_fill(trace, np.array(gemms))
    assert fill.blocks.tolist() == [112] * 3
    assert fill.free_sms.tolist() == [112] * 3
    assert fill.fill.tolist() == [1.0] * 3
    assert not fill.underfilled.any()
    # 384 threads, 168 registers: 65536 // (168 * 384) = 1 block per SM; 384 / 2048 threads.
    assert fill.resident_blocks.tolist() == [1] * 3
    assert fill.theoretical_occupancy_pct.tolist() == pytest.approx([18.75] * 3)
    analysis = _analyze(moe_step_trace(), tmp_path, "a.json")
    facts = analysis.ranks[0].sections.kernels.facts
    assert facts.underfilled_us == 0
    assert facts.full_beside_comm_us == 1500  # the GEMMs: under-filled against all 132 SMs
    assert "low_occupancy" not in {f.id for f in analysis.findings}


def test_the_same_gemm_alone_leaves_sms_empty(tmp_path):
    """Control: without the communication kernels, 112 of 132 SMs (0.85 < 0.9) is part of
    the GPU, and 62.5% of kernel time is in such launches."""
    analysis = _analyze(moe_step_trace(with_comm=False), tmp_path)
    facts = analysis.ranks[0].sections.kernels.facts
    assert facts.underfilled_us == 1500
    assert facts.underfilled_empty_us == pytest.approx(1500 * (1 - 112 / 132))
    assert "low_occupancy" in {f.id for f in analysis.findings}


def test_kernels_named_persistent_are_full(tmp_path):
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [moe_step_trace().metadata["deviceProperties"][0]]
    for n in range(3):
        b.step(n, n * 1000, 1000)
        b.launch(n * 1000 + 5, 5, k_ts=n * 1000 + 10, k_dur=900,
                 name="void cutlass::device_kernel<GemmUniversal<"
                      "KernelTmaWarpSpecializedCooperative>>", args={"grid": [100, 1, 1]})
    analysis = _analyze(b, tmp_path)
    facts = analysis.ranks[0].sections.kernels.facts
    assert (facts.underfilled_us, facts.persistent_us) == (0, 2700)
    assert "low_occupancy" not in {f.id for f in analysis.findings}


def test_cuda_graph_replay_is_busy_and_attributed_to_the_launch(tmp_path):
    analysis = _analyze(graph_replay_trace(), tmp_path)
    r = analysis.ranks[0]
    # Busy [30, 929) of each 1000 µs step: 60 kernels, 14 µs each, 1 µs apart.
    assert r.timeline.busy_pct == pytest.approx(60 * 14 / 1000 * 100)
    launch = r.sections.launch
    assert (launch.graph_launches, launch.graph_kernels) == (3, 180)
    assert launch.kernels == 180 and launch.launches == 3
    # Graph kernels have no launch call of their own: no "shorter than launch" or "starved".
    assert launch.shorter_than_launch_pct is None and launch.starved_kernel_pct is None
    rows = {row.name: row for row in r.sections.kernels.rows}
    assert rows["triton_poi_fused_add_mul_0"].op == "CUDAGraph.replay"
    for f in analysis.findings:
        text = " ".join(filter(None, [f.fix.summary if f.fix else "", f.fix.pytorch
                                      if f.fix else ""]))
        assert "reduce-overhead" not in text and "CUDA graphs (" not in text


@pytest.mark.parametrize("runtime, device_category, pid", [
    ("mtia_runtime", "mtia_ccp_events", "mtia:0"),  # MTIA in HTA's format
    ("xpu_runtime", "kernel", 0),  # Intel XPU
    ("hpu_op", "kernel", "HPU 0"),  # Gaudi, Kineto's categories
])
def test_other_accelerators_get_a_device_timeline(tmp_path, runtime, device_category, pid):
    b = TraceBuilder()
    for n in range(2):
        t = n * 1000
        b.step(n, t, 1000)
        rt = b.event(runtime, "runFunction", t + 10, 20, {"correlation": 10 + n})
        b.events.append({"ph": "X", "cat": device_category, "name": "fused_matmul_relu",
                         "pid": pid, "tid": 1, "ts": b.base + t + 40, "dur": 400,
                         "args": {"correlation": 10 + n}})
        assert rt["cat"] == runtime
    r = _analyze(b, tmp_path).ranks[0]
    assert r.timeline is not None
    assert r.timeline.busy_pct == pytest.approx(40.0)
    assert r.sections.kernels.total_us == 800


@pytest.mark.parametrize("grid, underfilled", [(112, False), (100, True)])
def test_grid_sized_to_the_sms_communication_leaves(tmp_path, grid, underfilled):
    """A GEMM that runs while no communication kernel does, but with exactly 132 - 20 blocks
    (the job keeps 20 SMs for DeepEP) is sized on purpose; 100 blocks is not."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [moe_step_trace().metadata["deviceProperties"][0]]
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.stream = 20
        b.launch(t, 3, name=DISPATCH, k_ts=t, k_dur=300, args={"grid": [20, 1, 1]})
        b.stream = 7
        b.launch(t + 350, 3, name=FP8_GEMM, k_ts=t + 400, k_dur=500,
                 args={"grid": [grid, 1, 1]})
    facts = _analyze(b, tmp_path).ranks[0].sections.kernels.facts
    assert facts.underfilled_us == (1500 if underfilled else 0)
