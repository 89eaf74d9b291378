"""TensorBoard event files, read back with tensorboard's own event reader."""

from __future__ import annotations

import json

import pytest

from helpers.paths import TRACE_FILTER

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

from trainprof.cli import main  # noqa: E402


def _read(folder):
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def test_a_folder_of_ranks_logs_each_rank_to_tensorboard(tmp_path, monkeypatch, capsys):
    logdir = tmp_path / "tb"
    monkeypatch.setenv("TENSORBOARD_LOGDIR", str(logdir))
    result = tmp_path / "result.json"
    assert main(["analyze", str(TRACE_FILTER), "--log-to", "tensorboard", "--format", "json",
                 "-o", str(result)]) == 0
    # One line on stderr says where the files went (the folder TensorBoard is to be given).
    said = [line for line in capsys.readouterr().err.splitlines() if "TensorBoard" in line]
    assert said == [f"trainprof: wrote the TensorBoard files to {logdir} "
                    f"(tensorboard --logdir {logdir})"]
    expected = json.loads(result.read_text())
    events = _read(logdir)
    for rank in expected["ranks"]:
        steps = events.Scalars(f"trainprof/rank{rank['rank']}/step_ms")
        assert [(e.step, e.value) for e in steps] == [
            (s["step"], pytest.approx(s["ms"], rel=1e-6)) for s in rank["steps"]["per_step"]]
        (median,) = events.Scalars(f"trainprof/rank{rank['rank']}/step_ms_median")
        assert median.value == pytest.approx(rank["steps"]["median_ms"], rel=1e-6)
    (text,) = events.Tensors("trainprof/findings")
    table = text.tensor_proto.string_val[0].decode()
    assert table.startswith("| rank | id | severity |")
    assert all(f"| {f['id']} |" in table for f in expected["findings"])
    assert json.loads((logdir / "trainprof/trainprof-analysis.json").read_text())[
        "findings"] == expected["findings"]
    assert "<svg" in (logdir / "trainprof/trainprof-report.html").read_text()
