"""``StepTimer(log_to=...)`` on real CPU training: every step reaches the tracker."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

import trainprof  # noqa: E402

from tiny_training import STEPS, tiny, train  # noqa: E402


def test_each_step_and_the_summary_reach_tensorboard(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_LOGDIR", str(tmp_path / "tb"))
    model, optimizer = tiny()
    jsonl = tmp_path / "steps.jsonl"
    with trainprof.StepTimer(model, optimizer, log_every=None, jsonl_path=jsonl,
                             log_to="tensorboard") as timer:
        train(timer, model, optimizer)
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    logged = events.Scalars("trainprof/step_ms")
    assert [(e.step, e.value) for e in logged] == [
        (r["step"], pytest.approx(r["step_ms"], rel=1e-6)) for r in records]
    assert len(logged) == STEPS
    data = events.Scalars("trainprof/data_ms")
    assert [e.value for e in data] == [pytest.approx(r["data_ms"], rel=1e-6) for r in records]
    (samples,) = events.Scalars("trainprof/samples_per_s")
    assert samples.value == pytest.approx(timer.summary()["samples_per_s"], rel=1e-6)
    (median,) = events.Scalars("trainprof/step_ms_median")
    assert median.value == pytest.approx(timer.summary()["step_ms"]["median"], rel=1e-6)
    result = json.loads((tmp_path / "tb/trainprof/trainprof-step-timer.json").read_text())
    assert result["steps"] == timer.summary()["steps"] == STEPS - 1  # the warm-up step left out


def test_a_missing_tracker_package_stops_before_training(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)
    model, optimizer = tiny()
    with pytest.raises(trainprof.TrainprofError, match=r"pip install 'trainprof\[wandb\]'"):
        trainprof.StepTimer(model, optimizer, log_to="wandb")
