"""Rules with exact answers on synthetic traces, and the catalogue against docs/rules.md."""

from __future__ import annotations

import re

import pytest

import trainprof
from trainprof.diagnose import rules
from trainprof.diagnose.rules import FINDING_IDS, JOB_RULES, RANK_RULES

from conftest import ROOT
from tracegen import TraceBuilder

GB = 1_000_000_000
DEVICE = {"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 40 * GB, "computeMajor": 8,
          "computeMinor": 0, "numSms": 108}


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


@pytest.mark.parametrize("module", [rules.input, rules.host, rules.gpu, rules.training,
                                    rules.memory, rules.distributed])
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
    assert f.saving_pct == pytest.approx(10.0) and f.severity == "medium"
    assert f.saving_ms == pytest.approx(0.1)
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
