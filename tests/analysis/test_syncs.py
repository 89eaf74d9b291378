"""Synchronisations: exact answers on a synthetic trace, the culprits in real traces."""

from __future__ import annotations

import json

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.syncs import EXPLICIT_SYNC, PROFILER_SYNC, sync_stats
from trainprof.trace.load import load_file
from trainprof.trace.model import Kind, sync_call_kind, sync_cause

from helpers.paths import ALEXNET, BERT, RESNET_W0

STACK = "torch/_tensor.py(1): item;train.py(42): step;train.py(99): <module>"


def _item(builder, at: float, corr: int) -> None:
    """``loss.item()``: a copy to the host, then a stream sync of 40 µs."""
    builder.op("aten::item", at, 100, args={"Call stack": STACK})
    dense = builder.op("aten::_local_scalar_dense", at + 10, 80)
    ext = dense["args"]["External id"]
    builder.launch(at + 20, 10, kind="memcpy", name="Memcpy DtoH (Device -> Pageable)",
                   launcher="cudaMemcpyAsync", external_id=ext)
    builder.event("cuda_runtime", "cudaStreamSynchronize", at + 40, 40,
                  {"correlation": corr, "External id": ext})
    builder.event("cuda_sync", "Stream Sync", at + 41, 38, {"correlation": corr},
                  on_device=True)  # the same sync seen by CUPTI: not counted twice


@pytest.fixture
def synthetic(builder, tmp_path):
    builder.step(1, 0, 1000)
    _item(builder, 100, 9001)
    builder.step(2, 1000, 1000)
    _item(builder, 1100, 9002)
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 1500, 200)  # no op around it
    builder.op("aten::to", 1790, 100)
    builder.op("aten::copy_", 1795, 90)
    builder.event("cuda_runtime", "cudaMemcpy", 1800, 30)  # a blocking copy
    builder.event("cuda_sync", "Context Sync", 1900, 10, {"correlation": 9999}, on_device=True)
    builder.event("cuda_sync", "Stream Wait Event", 1950, 10, {"correlation": 9998},
                  on_device=True)  # a device-side wait: the host does not block
    trace = load_file(builder.write(tmp_path / "syncs.json"))
    return sync_stats(trace, find_steps(trace))


def test_synthetic_counts_and_time(synthetic):
    s = synthetic
    assert s.count == 5
    assert s.blocked_us == pytest.approx(40 + 40 + 200 + 30 + 10)
    # The device-wide Context Sync after the last op is the profiler's own: not the loop's.
    assert (s.profiler_syncs, s.loop_count, s.loop_blocked_us) == (1, 4, 310)
    assert s.blocked_pct == pytest.approx(310 / 2000 * 100)
    assert [(p.step, p.count, p.blocked_us) for p in s.per_step] == [(1, 1, 40), (2, 3, 270)]
    assert s.mean_per_step == 2.0
    assert len(s.notes) == 1 and "device side" in s.notes[0]


def test_synthetic_culprits(synthetic):
    sites = {(x.call, x.op): x for x in synthetic.sites}
    item = sites[("cudaStreamSynchronize", "aten::_local_scalar_dense")]
    assert (item.kind, item.caller, item.count, item.total_us) == ("stream", "aten::item", 2, 80)
    assert item.cause.startswith("aten::item: ")
    assert item.source == "train.py(42): step"
    explicit = sites[("cudaDeviceSynchronize", None)]
    assert (explicit.kind, explicit.cause, explicit.source) == ("device", EXPLICIT_SYNC, None)
    copy = sites[("cudaMemcpy", "aten::copy_")]
    assert (copy.kind, copy.caller) == ("memcpy", "aten::to")
    assert copy.cause == "aten::to: copies to the host"
    device_only = sites[("Context Sync", None)]
    assert device_only.kind == "device" and device_only.count == 1
    assert synthetic.sites[0] is explicit  # most time blocked first
    d = json.loads(json.dumps(synthetic.to_dict()))
    assert set(d) >= {"count", "blocked_us", "blocked_pct", "mean_per_step", "per_step", "sites"}


@pytest.mark.parametrize("kind, name, expected", [
    (Kind.RUNTIME, "cudaDeviceSynchronize", "device"),
    (Kind.RUNTIME, "hipStreamSynchronize", "stream"),
    (Kind.DRIVER, "cuEventSynchronize", "event"),
    (Kind.RUNTIME, "cudaMemcpy", "memcpy"),
    (Kind.RUNTIME, "hipMemcpyDtoH", "memcpy"),
    (Kind.RUNTIME, "cudaMemcpyAsync", None),
    (Kind.RUNTIME, "cudaStreamWaitEvent", None),
    (Kind.SYNC, "Event Sync", "event"),
    (Kind.SYNC, "Stream Wait Event", None),
    (Kind.CPU_OP, "cudaDeviceSynchronize", None),
])
def test_sync_calls(kind, name, expected):
    assert sync_call_kind(kind, name) == expected


def test_known_causes():
    assert sync_cause("aten::nonzero") == "output size depends on the data"
    assert sync_cause("aten::is_nonzero").startswith("tensor truth value")
    assert sync_cause("aten::add") is None


def test_resnet_syncs_come_from_copies_to_the_host():
    trace = load_file(RESNET_W0)
    s = sync_stats(trace, find_steps(trace))
    top = {(x.call, x.op, x.caller): x for x in s.sites}
    copies = top[("cudaStreamSynchronize", "aten::copy_", "aten::to")]
    assert copies.count == 12 and copies.source == "resnet50_profiler_api.py(44): <module>"
    # Two per step; the profiler's own synchronize in the last step is not counted per step.
    assert [p.count for p in s.per_step] == [2, 2, 2, 2, 2, 2]
    assert s.profiler_syncs == 1 and s.mean_per_step == s.loop_count / 6 == 2.0


def test_bert_sync_found_through_python_frames():
    trace = load_file(BERT)
    s = sync_stats(trace, find_steps(trace))
    site = next(x for x in s.sites if x.op == "aten::_local_scalar_dense")
    assert site.caller == "aten::is_nonzero" and site.cause.startswith("aten::is_nonzero")
    assert site.source.startswith("transformers/modeling_attn_mask_utils.py(")


def test_cuda_sync_events_are_not_counted_twice():
    """The AlexNet benchmark records both the runtime calls and CUPTI's cuda_sync events."""
    trace = load_file(ALEXNET)
    s = sync_stats(trace, find_steps(trace))
    calls = trace.events.of_kind(Kind.RUNTIME)
    names = [trace.events.names[i] for i in trace.events.name[calls]]
    expected = sum(n in ("cudaStreamSynchronize", "cudaDeviceSynchronize") for n in names)
    assert s.count == expected and not s.notes


def test_synthetic_loop_syncs_leave_out_the_profilers_own(synthetic):
    """The Context Sync after the last op is the profiler's; the other four are the loop's."""
    s = synthetic
    assert (s.loop_count, s.profiler_syncs) == (4, 1)
    assert s.loop_blocked_us == pytest.approx(40 + 40 + 200 + 30)
    own = next(x for x in s.sites if x.call == "Context Sync")
    assert own.cause == PROFILER_SYNC


def test_resnet_loop_syncs_and_what_they_cost():
    trace = load_file(RESNET_W0)
    s = sync_stats(trace, find_steps(trace))
    assert (s.loop_count, s.profiler_syncs) == (12, 1)
    # The GPU idles after each copy to the host until the host launches again; without the
    # sync the host would have been ahead by at most the time it was blocked.
    assert s.loop_gpu_idle_after_us > s.loop_avoidable_us > 0
    assert s.loop_avoidable_us <= s.loop_blocked_us
