"""Host time: GPU idle split by what the host was doing, exact on synthetic traces."""

from __future__ import annotations

import json

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.host import host_time
from trainprof.trace.load import load_file

from helpers.paths import TIMESFORMER


def one_step(b, gpu: bool = True):
    """One 1000 µs step: data wait [0, 200), preprocessing [200, 300), a kernel launched at 300
    running [310, 510), an op until 600 launching [600, 700), the optimizer [700, 800) with a
    kernel [720, 760), then 200 µs of Python no op records."""
    b.step(1, 0, 1000)
    b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 200)
    b.annotation("my_preprocess", 200, 100)
    b.annotation("Optimizer.step#SGD.step", 700, 100)
    b.op("aten::add_", 705, 20)
    b.op("aten::mul", 520, 80)
    if gpu:
        b.launch(300, 10, k_ts=310, k_dur=200)
        b.launch(590, 10, k_ts=600, k_dur=100)
        b.launch(710, 5, k_ts=720, k_dur=40)
    return b


def analysed(b, tmp_path):
    trace = load_file(b.write(tmp_path / "host.json"))
    return host_time(trace, find_steps(trace))


def test_gpu_idle_is_split_by_what_the_host_does(builder, tmp_path):
    h = analysed(one_step(builder), tmp_path)
    # Idle: [0, 310) [510, 600) [700, 720) [760, 1000) = 660 µs of the 1000 µs step.
    assert h.pct == pytest.approx({"data": 20.0, "communication": 0.0, "after_optimizer": 20.0,
                                   "lead_in": 10.0, "host_bound": 16.0})
    assert h.ms["host_bound"] == pytest.approx(0.16)
    assert [s.name for s in h.spots["lead_in"]] == ["my_preprocess"]
    assert [(p.step, p.ms) for p in h.after_optimizer_per_step_ms] == [(1, pytest.approx(0.2))]
    assert (h.optimizer.name, h.optimizer.ops_per_step, h.optimizer.implementation) == (
        "SGD", 1, "for-loop")
    assert h.data_loaders == ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
    assert json.loads(json.dumps(h.to_dict()))["pct"]["lead_in"] == pytest.approx(10.0)


def test_cpu_trace_measures_only_the_time_after_the_optimizer(builder, tmp_path):
    h = analysed(one_step(builder, gpu=False), tmp_path)
    assert h.pct["after_optimizer"] == pytest.approx(20.0)
    assert h.pct["host_bound"] is None and h.pct["lead_in"] is None and not h.gpu


def test_timesformer_lead_in_is_the_pipeline_preprocessing():
    trace = load_file(TIMESFORMER)
    h = host_time(trace, find_steps(trace))
    assert h.pct["lead_in"] == pytest.approx(57.0, abs=1.0) and h.pct["host_bound"] < 5
    assert h.spots["lead_in"][0].name.endswith("video_classification.py(129): preprocess")
