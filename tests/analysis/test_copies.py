"""Copies: exact figures on a synthetic trace; pageable/pinned and TraceLens's exposed memcpy."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.copies import copies
from trainprof.trace.load import load_file
from trainprof.trace.model import memcpy_direction, memcpy_host_memory

from helpers.paths import RESNET_W0, TIMESFORMER, TRACE_FILTER


def copies_trace(b):
    """Compute kernel 100-300, NCCL kernel 400-500 (stream 8); copies around them."""
    b.step(1, 0, 1000)
    b.launch(90, 5, k_ts=100, k_dur=200, name="volta_sgemm_128x64_nn")
    b.launch(40, 5, kind="memcpy", name="Memcpy HtoD (Pageable -> Device)", k_ts=50,
             k_dur=100, args={"bytes": 1_000_000})  # exposed 50-100
    b.launch(590, 5, kind="memcpy", name="Memcpy HtoD (Pinned -> Device)", k_ts=600,
             k_dur=50, args={"bytes": 2_000_000})  # exposed
    b.launch(690, 5, kind="memcpy", name="Memcpy DtoD (Device -> Device)", k_ts=700,
             k_dur=10, args={"bytes": 1_000_000})
    b.launch(715, 3, kind="memset", name="Memset (Device)", k_ts=720, k_dur=5,
             args={"bytes": 1000})
    b.stream = 8
    b.launch(390, 5, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", k_ts=400, k_dur=100)
    b.launch(440, 5, kind="memcpy", name="Memcpy DtoH (Device -> Pinned)", k_ts=450,
             k_dur=20, args={"bytes": 400_000})  # under the NCCL kernel
    return b


def test_copies_exact(tmp_path, builder):
    trace = load_file(copies_trace(builder).write(tmp_path / "t.json"))
    result = copies(trace, find_steps(trace))
    assert [r.kind for r in result.rows] == ["HtoD", "DtoH", "DtoD", "memset"]
    h2d = result.row("HtoD")
    assert (h2d.count, h2d.bytes, h2d.time_us, h2d.exposed_us) == (2, 3_000_000, 150, 100)
    assert h2d.bandwidth_gbps == pytest.approx(20.0)  # 3 MB in 150 µs
    assert (h2d.pageable_count, h2d.pinned_count) == (1, 1)
    assert (h2d.pageable_bytes, h2d.pinned_bytes) == (1_000_000, 2_000_000)
    assert result.row("DtoH").exposed_us == 0  # hidden under communication
    assert result.exposed_ms_per_step == pytest.approx((100 + 10 + 5) / 1000)
    d = result.to_dict()
    assert d["exposed_pct"] == pytest.approx(11.5)
    row = d["kinds"][0]
    assert row["time_pct"] == pytest.approx(15.0) and row["exposed_pct"] == pytest.approx(10.0)
    # The overview's exposed-copy share uses the same definition.
    tl = trainprof.analyze([trace]).ranks[0].timeline
    assert tl.exposed_memcpy_pct == pytest.approx(d["exposed_pct"])


def test_memcpy_names():
    assert memcpy_direction("Memcpy HtoD (Pageable -> Device)") == "HtoD"
    assert memcpy_direction("Memcpy PtoP (Device -> Device)") == "PtoP"
    assert memcpy_direction("CopyDeviceToHost") == "DtoH"
    assert memcpy_direction("Memcpy HtoA (Pageable -> Array)") == "other"
    assert memcpy_host_memory("Memcpy DtoH (Device -> Pinned)") == "pinned"
    assert memcpy_host_memory("Memcpy DtoD (Device -> Device)") is None


def test_pageable_and_pinned_on_a_real_trace():
    trace = load_file(TRACE_FILTER / "sampled_rank-0.json.gz")
    h2d = copies(trace, find_steps(trace)).row("HtoD")
    assert (h2d.count, h2d.pageable_count, h2d.pinned_count) == (24, 16, 8)
    assert h2d.pinned_bytes == 4_849_696


def test_resnet_pageable_input_copies():
    trace = load_file(RESNET_W0)
    result = copies(trace, find_steps(trace))
    h2d = result.row("HtoD")
    assert h2d.count == 12 and h2d.pageable_count == 12
    assert h2d.bandwidth_gbps == pytest.approx(10.06, abs=0.01)


def test_exposed_memcpy_matches_tracelens():
    """TraceLens: exposed memcpy 2.17% of the 160.0 ms GPU span (memsets not counted)."""
    trace = load_file(TIMESFORMER)
    rank = trainprof.analyze([trace]).ranks[0]
    result = rank.sections.copies
    exposed = sum(r.exposed_us for r in result.rows if r.kind != "memset")
    assert exposed / (rank.timeline.device_span_ms * 1000) * 100 == pytest.approx(2.17, abs=0.1)


def test_no_copies(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.launch(10, 5, k_ts=20, k_dur=30)
    trace = load_file(builder.write(tmp_path / "t.json"))
    result = copies(trace, find_steps(trace))
    assert result.rows == [] and result.to_dict()["exposed_pct"] == 0
