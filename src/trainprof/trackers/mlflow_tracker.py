"""MLflow: metrics with their step, findings as a table artifact and tags, files as artifacts.

Logs into the run the code already has (``mlflow.active_run()``, or the ``run_id`` given),
else into a new run that it ends at ``close()``. The server is the one MLflow itself would use
(``MLFLOW_TRACKING_URI``, or ``./mlruns``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from trainprof.trackers.extras import require

#: MLflow accepts at most this many metrics in one request.
_BATCH = 1000
#: The experiment of a new run when ``MLFLOW_EXPERIMENT_NAME`` does not name one.
DEFAULT_EXPERIMENT = "trainprof"


class MlflowTracker:
    name = "mlflow"

    def __init__(self, run_id: str | None = None, run_name: str | None = None,
                 client: Any = None) -> None:
        mlflow = require("mlflow", "mlflow")
        self._entities = require("mlflow.entities", "mlflow")
        self.client = client or mlflow.MlflowClient()
        active = mlflow.active_run()
        self.run_id = run_id or (active.info.run_id if active else None)
        self.owned = self.run_id is None
        if self.owned:
            experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else \
                self.client.create_experiment(experiment)
            self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.log_series([(step or 0, metrics)])

    def log_series(self, series: list[tuple[int, dict[str, float]]]) -> None:
        """Every step's metrics in as few requests as MLflow allows."""
        now = int(time.time() * 1000)
        items = [self._entities.Metric(k, v, now, step) for step, metrics in series
                 for k, v in metrics.items()]
        for i in range(0, len(items), _BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + _BATCH])

    def log_findings(self, columns: tuple[str, ...], rows: list[list[Any]],
                     tags: dict[str, str]) -> None:
        data = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
        self.client.log_table(self.run_id, data=data, artifact_file="trainprof/findings.json")
        if tags:
            self.client.log_batch(self.run_id, tags=[self._entities.RunTag(k, v)
                                                     for k, v in tags.items()])

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="trainprof")

    def close(self) -> None:
        if self.owned:
            self.client.set_terminated(self.run_id)
