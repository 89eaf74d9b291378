"""Rules with exact answers on synthetic traces, and the catalogue against docs/rules.md."""

from __future__ import annotations

import re
import sys

import pytest

import trainprof
from trainprof.diagnose.registry import FINDING_IDS, JOB_RULES, RANK_RULES

from helpers.paths import ROOT
from helpers.tracegen import TraceBuilder

GB = 1_000_000_000
DEVICE = {"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 40 * GB, "computeMajor": 8,
          "computeMinor": 0, "numSms": 108}

#: Every module that holds a registered rule (diagnose/registry.py).
RULE_MODULES = sorted({sys.modules[r.__module__] for r in [*RANK_RULES, *JOB_RULES]},
                      key=lambda m: m.__name__)


def findings(b, tmp_path) -> dict:
    b.metadata["deviceProperties"] = [DEVICE]
    analysis = trainprof.analyze(b.write(tmp_path / "trace.json"))
    return {f.id: f for f in analysis.findings}


def test_a_sync_per_step_costs_the_idle_gap_it_opens(builder, tmp_path):
    """Each 1000 µs step: a kernel [10, 500); `loss.item()` blocks [110, 510); the next kernel
    is launched at 700. The GPU idles 200 µs after the sync; the host was blocked 400 µs, so
    without the sync it would have launched in time: 200 µs (20%) saved per step."""
    for n in range(3):
        t = n * 1000
        builder.step(n, t, 1000)
        builder.launch(t + 5, 5, k_ts=t + 10, k_dur=490, name="volta_sgemm_128x64_nn")
        builder.op("aten::item", t + 100, 420)
        builder.event("cuda_runtime", "cudaStreamSynchronize", t + 110, 400,
                      {"correlation": 50 + n})
        builder.op("aten::add", t + 690, 30)
        builder.launch(t + 700, 5, k_ts=t + 710, k_dur=280, name="elementwise_kernel")
    f = findings(builder, tmp_path)["sync_points"]
    assert f.saving_pct == pytest.approx(20.0) and f.severity == "high"
    assert f.saving_ms == pytest.approx(0.2)
    site = next(e for e in f.evidence if e.what.startswith("cudaStreamSynchronize"))
    assert "aten::item" in site.where


def test_grad_scaler_ops_are_fp16_scaler_overhead(builder, tmp_path):
    for n in range(3):
        t = n * 1000
        builder.step(n, t, 1000)
        builder.launch(t + 5, 5, k_ts=t + 10, k_dur=800, name="sm80_xmma_gemm_bf16")
        builder.op("aten::_amp_foreach_non_finite_check_and_unscale_", t + 820, 80)
        builder.op("aten::_amp_update_scale_", t + 900, 20)
    f = findings(builder, tmp_path)["fp16_scaler_overhead"]
    assert f.saving_pct == pytest.approx(10.0) and f.severity == "medium"


def _memory_steps(b, peak_share: float, growth: int = 0) -> None:
    """Three steps allocating up to ``peak_share`` of the 40 GB device, then freeing all but
    ``growth`` bytes."""
    level = 0
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 5, 5, k_ts=t + 10, k_dur=900, name="sm80_xmma_gemm_bf16")
        size = int(peak_share * 40 * GB) - level
        level += size
        b.memory(t + 100, size, level, reserved=level)
        level -= size - growth
        b.memory(t + 900, -(size - growth), level, reserved=level + size - growth)


def test_nearly_full_device_is_memory_pressure(builder, tmp_path):
    _memory_steps(builder, 0.95)
    found = findings(builder, tmp_path)
    f = found["memory_pressure"]
    assert f.severity == "high" and f.saving_pct == 0 and "memory_headroom" not in found
    assert f.evidence[0].value == pytest.approx(95.0)


def test_mostly_empty_device_is_memory_headroom(builder, tmp_path):
    _memory_steps(builder, 0.2)
    found = findings(builder, tmp_path)
    assert found["memory_headroom"].severity == "low" and "memory_pressure" not in found


def test_every_rule_is_registered_and_documented():
    names = [r.__name__ for r in RANK_RULES] + [r.__name__ for r in JOB_RULES]
    assert sorted(names) == sorted(FINDING_IDS)
    doc = (ROOT / "docs" / "rules.md").read_text()
    headings = set(re.findall(r"^## ([a-z0-9-]+)$", doc, re.MULTILINE))
    assert {i.replace("_", "-") for i in FINDING_IDS} <= headings


@pytest.mark.parametrize("module", RULE_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_threshold_is_named_in_the_docs(module):
    doc = (ROOT / "docs" / "rules.md").read_text()
    constants = [k for k, v in vars(module).items()
                 if k.isupper() and not k.startswith("_") and isinstance(v, int | float)
                 and not isinstance(v, bool)]
    assert constants
    assert [c for c in constants if f"`{c}`" not in doc] == []


def _copy_steps(b, copy_dur: float, host: str) -> None:
    """Three 1000 µs steps: an input copy [10, 10 + copy_dur) from ``host`` memory with no
    kernel running, then a GEMM to the end of the step."""
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 5, 5, kind="memcpy", name=f"Memcpy HtoD ({host} -> Device)",
                 k_ts=t + 10, k_dur=copy_dur, launcher="cudaMemcpyAsync",
                 args={"bytes": 8_000_000})
        b.launch(t + 15, 5, k_ts=t + 10 + copy_dur, k_dur=980 - copy_dur,
                 name="sm80_xmma_gemm_bf16")


def test_exposed_copies_cost_their_share_of_the_step(builder, tmp_path):
    _copy_steps(builder, 100, "Pinned")  # 100 of 1000 µs: 10%, above COPIES_PCT
    f = findings(builder, tmp_path)["host_to_device_copies"]
    assert f.severity == "medium"
    # 10% exposed, but the host's step (ProfilerStep) outlasts the GPU's work by 10 µs, so the
    # critical path runs on the host for most of the step and caps the saving to the copies,
    # launches and syncs on it (docs/critical_path.md).
    capped = next(e for e in f.evidence if e.what.startswith("saving capped"))
    assert "(was 10.0%)" in capped.what
    assert f.saving_pct == pytest.approx(capped.value, abs=0.05) and f.saving_pct < 10.0
    assert f.saving_ms == pytest.approx(f.saving_pct / 100.0, rel=1e-6)
    assert "8.0 MB/step" in f.evidence[1].where and "pageable" not in f.evidence[1].where


def test_pageable_copies_fire_low_even_when_short(builder, tmp_path):
    _copy_steps(builder, 20, "Pageable")  # 2% exposed: only the pageable source is the finding
    f = findings(builder, tmp_path)["host_to_device_copies"]
    assert f.severity == "low" and f.title == "3 copies from pageable memory"
    assert f.saving_pct == pytest.approx(2.0)


def test_short_pinned_copies_are_no_finding(builder, tmp_path):
    _copy_steps(builder, 20, "Pinned")
    assert "host_to_device_copies" not in findings(builder, tmp_path)


def _kernel_steps(b, blocks_per_sm: float) -> None:
    """Three 1000 µs steps, each one 900 µs kernel with the given blocks per SM."""
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 5, 5, k_ts=t + 10, k_dur=900, name="sm80_xmma_gemm_bf16",
                 args={"blocks per SM": blocks_per_sm, "est. achieved occupancy %": 10})
        # The host waits for the kernel (a loss.item()): the kernel is on the critical path,
        # which bounds the saving (diagnose/path_bounds.py).
        b.event("cuda_runtime", "cudaDeviceSynchronize", t + 11, 900)


def test_kernels_with_fewer_blocks_than_sms_are_low_occupancy(builder, tmp_path):
    _kernel_steps(builder, 0.25)  # a quarter of the SMs busy: 675 of every 900 µs left empty
    f = findings(builder, tmp_path)["low_occupancy"]
    assert f.evidence[0].value == pytest.approx(100.0)
    assert f.saving_pct == pytest.approx(67.5) and f.severity == "high"


def test_full_launches_or_a_full_device_are_no_low_occupancy(builder, tmp_path):
    _kernel_steps(builder, 4.0)
    assert "low_occupancy" not in findings(builder, tmp_path)
    full = TraceBuilder()
    _kernel_steps(full, 0.25)
    for n in range(3):  # the device is 90% full: a larger batch has no room
        full.memory(n * 1000 + 50, int(36 * GB) if n == 0 else 0, int(36 * GB))
    (tmp_path / "full").mkdir()
    assert "low_occupancy" not in findings(full, tmp_path / "full")


def _gpu_steps(b, gemm_us: float = 985, memory_share: float = 0.6) -> None:
    """Four 1000 µs steps of one Tensor Core GEMM launched by `aten::mm`, with the device
    ``memory_share`` full: a GPU-bound step with nothing to fix."""
    for n in range(4):
        t = n * 1000
        b.step(n, t, 1000)
        op = b.op("aten::mm", t + 2, 10)
        b.launch(t + 5, 5, k_ts=t + 10, k_dur=gemm_us, name="sm80_xmma_gemm_bf16",
                 external_id=op["args"]["External id"])
        level = int(memory_share * 40 * GB)
        b.memory(t + 100, level if n == 0 else 0, level)


def test_a_healthy_gpu_step_has_no_finding(builder, tmp_path):
    """The GPU control: busy 98.5% of the step on Tensor Core GEMMs, 60% of its memory in use;
    none of the GPU rules (host, kernels, Tensor Cores, memory) fires."""
    _gpu_steps(builder)
    assert findings(builder, tmp_path) == {}


def test_gpu_idle_while_the_host_works_is_host_bound(builder, tmp_path):
    """Each 1000 µs step: kernels [10, 300) and [900, 995); the host runs `aten::index` over
    [300, 890). Idle: [0, 10) + [300, 900) + [995, 1000) = 615 µs; the 5 µs before the first
    launch is the step's lead-in, the other 610 µs (61%) are host-bound."""
    for n in range(4):
        t = n * 1000
        builder.step(n, t, 1000)
        builder.launch(t + 5, 5, k_ts=t + 10, k_dur=290, name="sm80_xmma_gemm_bf16")
        builder.op("aten::index", t + 300, 590)
        builder.launch(t + 895, 5, k_ts=t + 900, k_dur=95, name="sm80_xmma_gemm_bf16")
    found = findings(builder, tmp_path)
    f = found["host_bound"]
    assert (f.saving_pct, f.severity) == (pytest.approx(61.0), "high")
    assert f.evidence[1].value == pytest.approx(61.5)  # all GPU idle in the step
    gap = next(e for e in f.evidence if e.what == "longest GPU gap")
    assert gap.value == pytest.approx(0.6) and "aten::index 590 µs" in gap.where
    assert "small_kernels" not in found  # 8 kernels of 95-290 µs


def test_launch_bound_tiny_kernels_are_small_kernels(builder, tmp_path):
    """40 kernels of 3 µs per step, each launched by a 20 µs call: the GPU waits on launches."""
    for n in range(4):
        t = n * 1000
        builder.step(n, t, 1000)
        for k in range(40):
            builder.launch(t + 5 + 24 * k, 20, k_ts=t + 26 + 24 * k, k_dur=3,
                           name="elementwise_kernel")
    f = findings(builder, tmp_path)["small_kernels"]
    assert f.evidence[0].value == pytest.approx(100.0)  # every kernel under 10 µs
    assert f.severity == "high" and f.saving_pct > 80


def test_reserved_far_above_allocated_is_memory_fragmentation(builder, tmp_path):
    _gpu_steps(builder)
    builder.events = [e for e in builder.events if e.get("name") != "[memory]"]
    for n in range(4):  # 24 GB allocated, 36 GB reserved: 1.5x
        builder.memory(n * 1000 + 100, int(24 * GB) if n == 0 else 0, int(24 * GB),
                       reserved=int(36 * GB))
    f = findings(builder, tmp_path)["memory_fragmentation"]
    assert f.evidence[0].value == pytest.approx(1.5) and f.saving_pct == 0
    assert f.title == "Reserved memory is 1.5x what is allocated"
    assert "no saving is estimated" in f.saving_assumption  # no allocator calls to save


def test_driver_allocations_every_step_are_memory_fragmentation(builder, tmp_path):
    """cudaMalloc and cudaFree of 100 µs each in every 1000 µs step: 20% of the step."""
    for n in range(4):
        t = n * 1000
        builder.step(n, t, 1000)
        builder.launch(t + 5, 5, k_ts=t + 10, k_dur=600, name="sm80_xmma_gemm_bf16")
        builder.event("cuda_runtime", "cudaMalloc", t + 620, 100, {"correlation": 9000 + n})
        builder.event("cuda_runtime", "cudaFree", t + 730, 100, {"correlation": 9100 + n})
        builder.launch(t + 840, 5, k_ts=t + 850, k_dur=145, name="sm80_xmma_gemm_bf16")
        builder.memory(t + 100, int(24 * GB) if n == 0 else 0, int(24 * GB))
    f = findings(builder, tmp_path)["memory_fragmentation"]
    calls = next(e for e in f.evidence if e.what == "allocator calls per step")
    assert calls.value == pytest.approx(2.0) and f.saving_pct == pytest.approx(20.0)
    assert f.title == "The allocator calls cudaMalloc/cudaFree 2 times per step"


@pytest.mark.parametrize("module", RULE_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_fix_has_a_summary_and_plain_pytorch_code(module):
    from trainprof.diagnose.findings import Fix

    fixes = {k: v for k, v in vars(module).items() if isinstance(v, Fix)}
    assert fixes
    for name, fix in fixes.items():
        assert fix.summary.endswith(".") and fix.pytorch.strip(), name
        assert fix.accelerate != fix.pytorch, name  # given only where it differs


def test_evidence_reads_as_a_person_writes_it():
    from trainprof.diagnose.findings import Evidence
    from trainprof.report.labels import evidence_text

    for e, text in [(Evidence("softmax", 44.44, "% of kernel time", "rank 0"),
                     "softmax: 44.4% of kernel time (rank 0)"),
                    (Evidence("wait", 59.26, "ms"), "wait: 59.3 ms"),
                    (Evidence("ratio", 1.5, "x"), "ratio: 1.5x"),
                    (Evidence("ops", 807, ""), "ops: 807")]:
        assert str(e) == evidence_text(e) == text
