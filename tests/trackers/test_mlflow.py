"""MLflow with a real ``mlflow server`` on 127.0.0.1, read back with ``MlflowClient``."""

from __future__ import annotations

import json
import time
import warnings

import pytest

from helpers.paths import RESNET_W0
from tracker_services import mlflow_server, stop

mlflow = pytest.importorskip("mlflow")

import trainprof  # noqa: E402
from trainprof.cli import main  # noqa: E402
from trainprof.trackers.base import TrackerWarning  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as (url, _):
        yield url


@pytest.fixture
def tracking(server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    mlflow.set_tracking_uri(server)
    yield mlflow.MlflowClient(server)
    mlflow.set_tracking_uri(None)


def _runs(client, experiment):
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found else []


def test_analyze_log_to_mlflow_logs_steps_findings_and_artifacts(tracking, monkeypatch,
                                                                   tmp_path):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "cli")
    result = tmp_path / "result.json"
    assert main(["analyze", str(RESNET_W0), "--log-to", "mlflow", "--format", "json",
                 "-o", str(result)]) == 0
    expected = json.loads(result.read_text())
    (run,) = _runs(tracking, "cli")
    assert run.info.status == "FINISHED"
    history = tracking.get_metric_history(run.info.run_id, "trainprof/step_ms")
    per_step = expected["ranks"][0]["steps"]["per_step"]
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (s["step"], pytest.approx(s["ms"])) for s in per_step]
    assert len(per_step) == 6
    metrics = run.data.metrics
    assert metrics["trainprof/step_ms_median"] == pytest.approx(
        expected["ranks"][0]["steps"]["median_ms"])
    assert metrics["trainprof/phase/data_pct"] == pytest.approx(
        expected["ranks"][0]["phases_pct"]["data"])
    assert metrics["trainprof/gpu/utilization_pct"] == pytest.approx(
        expected["ranks"][0]["gpu"]["utilization_pct"])
    assert run.data.tags["trainprof.finding.data_loading"] == "high"
    names = {a.path for a in tracking.list_artifacts(run.info.run_id, "trainprof")}
    assert names == {"trainprof/trainprof-analysis.json", "trainprof/trainprof-report.html",
                     "trainprof/findings.json"}
    folder = tracking.download_artifacts(run.info.run_id, "trainprof", str(tmp_path / "dl"))
    logged = json.loads((tmp_path / "dl/trainprof/trainprof-analysis.json").read_text())
    assert logged["findings"] == expected["findings"]
    table = json.loads((tmp_path / "dl/trainprof/findings.json").read_text())
    assert [row[table["columns"].index("id")] for row in table["data"]] == [
        f["id"] for f in expected["findings"]]
    assert folder


def test_the_active_run_is_reused_and_left_open(tracking, monkeypatch):
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "reuse")
    mlflow.set_experiment("reuse")
    analysis = trainprof.analyze(RESNET_W0)
    with mlflow.start_run() as run:
        assert trainprof.log_analysis(analysis, "mlflow", artifacts=False) == ["mlflow"]
        assert tracking.get_run(run.info.run_id).info.status == "RUNNING"
    (only,) = _runs(tracking, "reuse")
    assert only.info.run_id == run.info.run_id
    assert only.data.metrics["trainprof/findings"] == len(analysis.findings)


def test_a_server_stopped_mid_run_costs_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    analysis = trainprof.analyze(RESNET_W0)
    from trainprof.trackers.log import log_analysis
    from trainprof.trackers.resolve import open_trackers

    with mlflow_server(tmp_path) as (url, proc):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        mlflow.set_tracking_uri(url)
        trackers = open_trackers("mlflow")  # the run starts while the server is up
        stop(proc)
        started = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log_analysis(analysis, trackers)
        mlflow.set_tracking_uri(None)
    tracker_warnings = [w for w in caught if issubclass(w.category, TrackerWarning)]
    assert len(tracker_warnings) == 1
    assert "logging to mlflow failed" in str(tracker_warnings[0].message)
    assert trackers[0].failed
    assert time.monotonic() - started < 60  # gave up, rather than retrying for minutes


def test_without_mlflow_it_is_one_sentence_and_exit_2():
    import subprocess
    import sys

    from helpers.paths import ROOT

    code = ("import sys; sys.modules['mlflow'] = None; "
            "from trainprof.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(RESNET_W0),
                           "--log-to", "mlflow"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("trainprof: logging to mlflow needs the mlflow package: "
                                   "install it with pip install 'trainprof[mlflow]'.")


def test_training_goes_on_when_the_server_stops(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from tiny_training import tiny, train

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    model, optimizer = tiny()
    with mlflow_server(tmp_path) as (url, proc):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        mlflow.set_tracking_uri(url)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            timer = trainprof.StepTimer(model, optimizer, log_every=None, log_to="mlflow")
            train(timer, model, optimizer, steps=3)
            stop(proc)
            train(timer, model, optimizer, steps=5)
            timer.close()
        mlflow.set_tracking_uri(None)
    assert timer.summary()["steps"] == 7  # 8 steps, the first left out as warm-up
    tracker_warnings = [w for w in caught if issubclass(w.category, TrackerWarning)]
    assert len(tracker_warnings) == 1
    assert torch.isfinite(next(model.parameters())).all()


def test_no_server_at_all_costs_a_warning_not_the_analysis(tmp_path, monkeypatch):
    from tracker_services import free_port

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    result = tmp_path / "result.json"
    with pytest.warns(TrackerWarning, match="could not start logging to mlflow") as caught:
        assert main(["analyze", str(RESNET_W0), "--log-to", "mlflow", "--format", "json",
                     "-o", str(result)]) == 0
    assert json.loads(result.read_text())["findings"][0]["id"] == "data_loading"
    assert len([w for w in caught if w.category is TrackerWarning]) == 1
    assert len(str(caught[0].message)) < 300  # one readable line, not the whole exception


def test_the_lightning_callback_logs_into_the_mlflow_loggers_run(tracking, tmp_path):
    torch = pytest.importorskip("torch")
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import MLFlowLogger

    from trainprof.integrations.lightning import TrainprofCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    logger = MLFlowLogger(experiment_name="lightning", tracking_uri=tracking.tracking_uri)
    callback = TrainprofCallback(log_to=True, output_trace_dir=str(tmp_path / "traces"),
                                 schedule_option={"wait": 1, "warmup": 1, "active": 3})
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    pl.Trainer(accelerator="cpu", devices=1, max_steps=6, callbacks=[callback], logger=logger,
               log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, default_root_dir=tmp_path).fit(
        Tiny(), torch.utils.data.DataLoader(data, batch_size=8))
    (run,) = _runs(tracking, "lightning")
    assert run.info.run_id == logger.run_id
    assert "loss" in run.data.metrics  # the user's own metric, in the same run
    assert len(tracking.get_metric_history(run.info.run_id, "trainprof/step_ms")) == 3
