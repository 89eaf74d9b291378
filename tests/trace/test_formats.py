"""Every format variant loads: real traces from tests/data/traces and synthetic edge cases."""

from __future__ import annotations

import gzip
import importlib.util
import json

import numpy as np
import pytest

import trainprof
from trainprof.report.json import to_json_bytes
from trainprof.trace.load import load_file
from trainprof.trace.model import FLAG_COMM, Kind

from helpers.paths import (
    ALEXNET,
    BERT,
    BIG_TRACE,
    COMPILED,
    GPU_METRICS,
    NCCL_TRACE,
    NS_TRACE,
    PARAM,
    RESNET_W0,
    SHARED,
    TIMESFORMER,
    TRACE_FILTER,
)
from helpers.tracegen import TraceBuilder

ALL_REAL = sorted(p for p in SHARED.rglob("*.json*") if "result_check" not in p.name)


def _checker():
    """``check`` from tests/data/tools/check_analysis_json.py (standard library only)."""
    spec = importlib.util.spec_from_file_location(
        "check_analysis_json", SHARED.parent / "tools" / "check_analysis_json.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check


analysis_json_problems = _checker()


@pytest.mark.parametrize("path", ALL_REAL, ids=lambda p: p.name[:40])
def test_every_shared_trace_loads_and_analyses(path):
    analysis = trainprof.analyze(path)
    rank = analysis.ranks[0]
    assert rank.steps.count >= 1 and rank.steps.mean_ms > 0
    assert sum(rank.breakdown_pct.values()) == pytest.approx(100, abs=1e-6)
    assert sum(rank.phases_pct.values()) == pytest.approx(100, abs=1e-6)
    assert rank.gpu is not None  # all shared traces are GPU traces
    # The JSON result of every shared trace meets the contract (tests/data/tools' checker).
    result = json.loads(to_json_bytes(analysis))
    assert analysis_json_problems(result) == []


def test_old_and_new_category_names_map_to_the_same_kinds():
    old = load_file(RESNET_W0).events
    new = load_file(NS_TRACE).events
    for ev in (old, new):
        assert (ev.kind == Kind.KERNEL).sum() > 1000
        assert (ev.kind == Kind.RUNTIME).sum() > 1000
        assert (ev.kind == Kind.CPU_OP).sum() > 1000
        assert (ev.kind == Kind.STEP).sum() >= 5


def test_old_lowercase_external_id_is_read():
    ev = load_file(RESNET_W0).events
    kernels = ev.kind == Kind.KERNEL
    assert (ev.external_id[kernels] > 0).mean() > 0.99


def test_cuda_driver_launches_link_compiled_kernels():
    from trainprof.analysis.overview.steps import launch_links

    trace = load_file(COMPILED)
    ev = trace.events
    assert (ev.kind == Kind.DRIVER).sum() == 537
    dev, launch = launch_links(trace)
    driver_launched = ev.kind[launch] == Kind.DRIVER
    assert driver_launched.sum() >= 500  # Triton kernels started by cuLaunchKernel
    assert (ev.kind[dev[driver_launched]] == Kind.KERNEL).all()


def test_nanosecond_float_timestamps_keep_their_precision():
    ev = load_file(NS_TRACE).events
    frac = np.modf(ev.ts)[0]
    assert (np.abs(frac) > 0).mean() > 0.5  # sub-µs parts survived
    assert np.all(np.diff(ev.ts) >= 0)  # sorted


def test_base_time_nanoseconds_is_applied():
    trace = load_file(TIMESFORMER)
    assert trace.t0_us > 1.7e15  # absolute µs since the epoch (2025)


def test_legacy_compute_properties_are_read():
    trace = load_file(GPU_METRICS)
    assert trace.device_name() == "Tesla V100-DGXS-32GB"
    assert trace.compute_capability(0) == (7, 0)


def test_nccl_kernels_and_ops_are_communication():
    ev = load_file(NCCL_TRACE).events
    comm = ev.flagged(FLAG_COMM)
    names = {ev.names[i] for i in np.unique(ev.name[comm])}
    assert any(n.startswith("ncclKernel_AllReduce") for n in names)
    assert "nccl:all_reduce" in names


def test_sampled_traces_without_flows_load():
    traces = trainprof.load(TRACE_FILTER)
    assert [t.rank for t in traces] == [0, 1]
    assert all(len(t.flows) == 0 for t in traces)


def test_cpu_only_trace(tmp_path, builder):
    builder.step(3, 0, 100)
    builder.op("aten::linear", 10, 50)
    rank = trainprof.analyze(builder.write(tmp_path / "cpu.json")).ranks[0]
    assert rank.device == "CPU" and rank.gpu is None and rank.timeline is None
    assert rank.steps.per_step == [{"step": 3, "ms": pytest.approx(0.1)}]


def test_amd_trace_with_hip_launches_and_stream_zero(tmp_path):
    b = TraceBuilder(stream=0)
    b.step(1, 0, 100)
    b.launch(10, 5, name="Cijk_Ailk_Bljk_HHS_BH_MT128x128x32", k_dur=50,
             launcher="hipLaunchKernel")
    b.launch(70, 5, name="rcclGenericKernel(ncclDevComm*)", k_ts=80, k_dur=10,
             launcher="hipExtLaunchKernel")
    rank = trainprof.analyze(b.write(tmp_path / "amd.json")).ranks[0]
    assert rank.gpu is not None
    assert rank.timeline.compute_pct == pytest.approx(50)
    assert rank.timeline.communication_pct == pytest.approx(10)


def test_zero_duration_and_overlapping_events(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.op("aten::empty", 5, 0)
    builder.op("a", 10, 50)
    builder.op("b", 30, 50)  # overlaps a without nesting
    builder.kernel("k0", 20, 0)
    rank = trainprof.analyze(builder.write(tmp_path / "t.json")).ranks[0]
    assert rank.breakdown_pct["cpu_exec"] == pytest.approx(70)
    assert rank.breakdown_pct["kernel"] == 0


def test_integers_beyond_64_bits(tmp_path, builder):
    builder.step(1, 0, 100)
    rt, k = builder.launch(10, 5, k_dur=20)
    huge = 2**70 + 5
    rt["args"]["correlation"] = huge
    k["args"]["correlation"] = huge
    rt["args"]["Python id"] = 2**80
    from trainprof.analysis.overview.steps import launch_links

    trace = load_file(builder.write(tmp_path / "t.json"))
    dev, launch = launch_links(trace)
    assert len(dev) == 1  # still linked through the oversized id
    assert trainprof.analyze(tmp_path / "t.json").ranks[0].gpu.utilization_pct == pytest.approx(20)


def test_gz_and_plain_json_give_the_same_numbers(tmp_path):
    raw = gzip.decompress(NCCL_TRACE.read_bytes())
    (tmp_path / "plain.json").write_bytes(raw)
    a = trainprof.analyze(NCCL_TRACE).to_dict()["ranks"][0]
    b = trainprof.analyze(tmp_path / "plain.json").to_dict()["ranks"][0]
    a.pop("file"), b.pop("file")
    assert a == b


def test_bare_event_list_is_a_trace(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.op("aten::add", 0, 100)
    (tmp_path / "list.json").write_text(json.dumps(builder.events))
    rank = trainprof.analyze(tmp_path / "list.json").ranks[0]
    assert rank.breakdown_pct["cpu_exec"] == pytest.approx(100)


def test_memory_events_are_columns():
    trace = load_file(BIG_TRACE)
    assert len(trace.memory) == 28010
    assert np.isfinite(trace.memory.total_allocated).mean() > 0.99
    old = load_file(RESNET_W0).memory
    assert len(old) == 12838 and np.isnan(old.total_allocated).all()  # old format: no totals


def test_alexnet_without_steps_is_one_window_with_a_note():
    rank = trainprof.analyze(ALEXNET).ranks[0]
    assert rank.step_source == "whole trace"
    assert rank.timeline.device_span_idle_pct > 99


def test_param_trace_steps_come_from_the_optimizer():
    rank = trainprof.analyze(PARAM).ranks[0]
    assert rank.step_source == "optimizer"
    assert rank.steps.count == 29  # 30 optimizer steps bound 29 full iterations


def test_bert_small_is_mostly_idle():
    tl = trainprof.analyze(BERT).ranks[0].timeline
    assert tl.device_span_idle_pct == pytest.approx(92.08, abs=1.0)
