"""W&B in offline mode: the run file it writes, read back record by record."""

from __future__ import annotations

import json

import pytest

from helpers.paths import RESNET_W0
from wandb_offline import artifacts, history, summary, tags

wandb = pytest.importorskip("wandb")

import trainprof  # noqa: E402
from trainprof.cli import main  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "trainprof-tests")
    monkeypatch.chdir(tmp_path)
    if wandb.run is not None:  # a run left open by an earlier test would take these logs
        wandb.run.finish()
    wandb.teardown()
    yield tmp_path
    if wandb.run is not None:
        wandb.run.finish()
    wandb.teardown()  # W&B keeps its settings (WANDB_DIR) in a process-wide singleton


def _run_files(folder):
    return sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))


def test_analyze_log_to_wandb_offline(offline):
    result = offline / "result.json"
    assert main(["analyze", str(RESNET_W0), "--log-to", "wandb", "--format", "json",
                 "-o", str(result)]) == 0
    expected = json.loads(result.read_text())
    (run_file,) = _run_files(offline)
    steps = [(int(h["trainprof/step"]), float(h["trainprof/step_ms"]))
             for h in history(run_file) if "trainprof/step_ms" in h]
    assert steps == [(s["step"], pytest.approx(s["ms"]))
                     for s in expected["ranks"][0]["steps"]["per_step"]]
    final = summary(run_file)
    assert float(final["trainprof/step_ms_median"]) == pytest.approx(
        expected["ranks"][0]["steps"]["median_ms"])
    assert float(final["trainprof/breakdown/dataloader_pct"]) == pytest.approx(
        expected["ranks"][0]["breakdown_pct"]["dataloader"])
    logged = dict(artifacts(run_file))
    assert sorted(logged[next(n for n in logged if n.startswith("trainprof-"))]) == [
        "trainprof-analysis.json", "trainprof-report.html"]
    (table_file,) = run_file.parent.glob("files/media/table/trainprof/findings_*.table.json")
    table = json.loads(table_file.read_text())
    assert [row[table["columns"].index("id")] for row in table["data"]] == [
        f["id"] for f in expected["findings"]]
    assert "trainprof:data_loading" in tags(run_file)


def test_the_current_wandb_run_is_reused(offline):
    analysis = trainprof.analyze(RESNET_W0)
    run = wandb.init(project="mine")
    run.log({"loss": 1.0})
    assert trainprof.log_analysis(analysis, wandb.run, artifacts=False) == ["wandb"]
    run.log({"loss": 0.5})  # still the user's to log into and to finish
    run.finish()
    (run_file,) = _run_files(offline)
    logged = history(run_file)
    assert [float(h["loss"]) for h in logged if "loss" in h] == [1.0, 0.5]
    assert sum("trainprof/step_ms" in h for h in logged) == 6
