"""The diagnosis of real GPU traces recorded by other projects (tests/data/traces)."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json

import numpy as np
import pytest

import trainprof
from trainprof.report.json import to_json_bytes

from helpers.paths import (
    ALEXNET,
    BERT,
    BIG_TRACE,
    NCCL_TRACE,
    NS_TRACE,
    PARAM,
    RESNET_W0,
    RESNET_W0_SPAN2,
    RESNET_W4,
    RESNET_W4_SPAN2,
    SHARED,
    TIMESFORMER,
    TRACE_FILTER,
)

HOST_FAMILY = ("host_bound", "small_kernels", "sync_points")
CHECKER = SHARED.parent / "tools" / "check_analysis_json.py"


@functools.cache
def analysed(path):
    return trainprof.analyze(path)


def ids(path) -> list[str]:
    return [f.id for f in analysed(path).findings]


@pytest.mark.parametrize("path", [RESNET_W0, RESNET_W0_SPAN2])
def test_resnet_without_workers_waits_for_data(path):
    top = analysed(path).findings[0]
    assert top.id == "data_loading" and top.severity == "high"
    # The rule's estimate is the plugin's DataLoader share (33.4% / 22.9%); the critical path
    # caps it at what the step would save with the DataLoader at zero (part of its wait is
    # off the path, while the GPU still runs the previous step).
    capped = next(e.what for e in top.evidence if e.what.startswith("saving capped"))
    was = float(capped.split("was ")[1].rstrip("%)"))
    assert was == pytest.approx(33.4 if path == RESNET_W0 else 22.9, abs=0.1)
    cp = analysed(path).ranks[0].sections.critical_path
    assert top.saving_pct == pytest.approx(cp.saving_cap_pct("data_loader", "DataLoader"))
    assert was - 1.0 < top.saving_pct < was
    assert "num_workers=0" in next(e.where for e in top.evidence if e.what == "data loader")


@pytest.mark.parametrize("path", [RESNET_W4, RESNET_W4_SPAN2])
def test_resnet_with_four_workers_does_not(path):
    assert "data_loading" not in ids(path)


def test_slow_steps_that_waited_for_data_say_so():
    """PARAM's ResNet (a multi-process DataLoader, steps from the optimizer annotations): its
    slow steps run the same ops as the others and most of their extra time is the DataLoader's
    wait, so step_variance says they waited for data and gives the loader fix, not contention.
    Our own reading from the file: ops and DataLoader event time per step window."""
    from trainprof.analysis.overview.steps import find_steps
    from trainprof.diagnose.rules.input import FASTER_WORKERS
    from trainprof.trace.load import load_file

    f = next(f for f in analysed(PARAM).findings if f.id == "step_variance")
    assert "ran the same ops and waited for data" in f.title and f.fix == FASTER_WORKERS
    trace = load_file(PARAM)
    steps = find_steps(trace)
    lo = trace.t0_us + steps.recorded_starts
    hi = trace.t0_us + steps.recorded_ends
    with gzip.open(PARAM) as raw:
        events = [e for e in json.load(raw)["traceEvents"] if e.get("ph") == "X"]
    ops = np.array([sum(a <= e["ts"] < b for e in events if e.get("cat") == "cpu_op")
                    for a, b in zip(lo, hi, strict=True)])
    loader = np.array([sum(e["dur"] for e in events if a <= e["ts"] < b
                           and e["name"].startswith("enumerate(DataLoader)"))
                       for a, b in zip(lo, hi, strict=True)])
    slow = np.isin(steps.numbers, analysed(PARAM).ranks[0].steps.slow_steps)
    assert abs(ops[slow].mean() / np.median(ops) - 1) < 0.05
    step_us = steps.ends - steps.starts
    excess = step_us[slow].mean() - np.median(step_us[~slow])
    assert loader[slow].mean() - np.median(loader[~slow]) > excess / 2


def test_resnet_runs_without_tensor_cores():
    """FP32 on a V100: 68% of kernel time in eligible convolutions and GEMMs (the plugin's
    figure), none on Tensor Cores."""
    f = next(f for f in analysed(RESNET_W0).findings if f.id == "no_tensor_cores")
    assert f.evidence[0].value == pytest.approx(67.6, abs=0.5) and f.evidence[1].value == 0


@pytest.mark.parametrize("path", [ALEXNET, BERT])
def test_host_bound_traces(path):
    assert ids(path)[0] in HOST_FAMILY


def test_bert_small_kernels_and_its_sync():
    found = {f.id: f for f in analysed(BERT).findings}
    assert found["small_kernels"].severity == "high"
    sync = found["sync_points"]
    assert any("is_nonzero" in e.where for e in sync.evidence)
    assert any("profiler's own" in e.what for e in sync.evidence)  # not counted


def test_timesformer_is_not_host_bound():
    """Its GPU is busy 99% of the device span; the step starts with 217 ms of video
    preprocessing in the Hugging Face pipeline, and attention runs unfused."""
    found = ids(TIMESFORMER)
    assert found[0] not in HOST_FAMILY and "host_bound" not in found
    assert "small_kernels" not in found
    top = analysed(TIMESFORMER).findings[0]
    assert top.id == "input_preprocessing"
    assert any("video_classification.py(129): preprocess" in e.where for e in top.evidence)
    assert "attention_not_fused" in found


def test_a100_ddp_shows_exposed_communication():
    """Exposed communication is only 6% of the step window (the GPU idles 76%, host-bound),
    but a quarter of the GPU's busy time. The host sets the step (the critical path holds no
    collective and 0.1% of sync waits): overlapping it saves at most that."""
    a = analysed(NCCL_TRACE)
    f = next(f for f in a.findings if f.id == "communication_exposed")
    of_busy = next(e for e in f.evidence if e.what == "of the GPU's busy time")
    share = next(e for e in f.evidence if e.what == "of the step")
    assert share.value == pytest.approx(5.9, abs=0.2) and of_busy.value > 20
    path = a.ranks[0].sections.critical_path
    on_path = path.split_pct["gpu_communication"] + path.split_pct["sync_wait"]
    bound = on_path * path.step_ms / a.ranks[0].steps.mean_ms
    assert f.saving_pct == pytest.approx(bound) and f.extra["saving_capped_by"] == "critical_path"


def test_gpu_bound_fp32_resnet_needs_tensor_cores():
    assert ids(NS_TRACE) == ["no_tensor_cores"]


def test_two_ranks_fold_into_one_finding_per_id():
    findings = analysed(TRACE_FILTER).findings
    assert len({f.id for f in findings}) == len(findings)
    host = next(f for f in findings if f.id == "host_bound")
    assert host.extra["ranks"] == [0, 1]
    assert any(e.what == "also found on" for e in host.evidence)


def _checker():
    spec = importlib.util.spec_from_file_location("check_analysis_json", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", [RESNET_W0, NCCL_TRACE, TRACE_FILTER, BERT, TIMESFORMER,
                                  ALEXNET, PARAM, BIG_TRACE])
def test_json_result_passes_the_schema_check(path):
    data = json.loads(to_json_bytes(analysed(path)))
    assert _checker().check(data) == []
    assert data["findings"], "every one of these traces has findings"
    savings = [f["saving_pct"] for f in data["findings"]]
    assert savings == sorted(savings, reverse=True)  # most costly first
    for f in data["findings"]:
        assert f["evidence"] and f["fix"]["summary"] and f["docs"].startswith("docs/rules.md#")
        assert f["saving_assumption"] and f["explanation"] and f["title"]
        assert f["severity"] in ("high", "medium", "low") and f["saving_ms"] >= 0
        assert all(e["what"] and e["value"] != "" for e in f["evidence"])
