"""Weights & Biases: metrics against trainprof's own step axis, findings as a ``wandb.Table``,
files as an artifact.

Logs into ``wandb.run`` (or the run given) when there is one, else starts a run (project
``WANDB_PROJECT``, or "trainprof") and finishes it at ``close()``. ``WANDB_MODE=offline`` works
as it does for any W&B run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainprof.trackers.extras import require

#: The step axis trainprof's per-step metrics are plotted against (W&B's own ``step`` belongs to
#: the training script, and must only grow).
STEP_KEY = "trainprof/step"


class WandbTracker:
    name = "wandb"

    def __init__(self, run: Any = None, run_name: str | None = None) -> None:
        self.wandb = require("wandb", "wandb")
        self.run = run if run is not None else self.wandb.run
        self.owned = self.run is None
        if self.owned:
            self.run = self.wandb.init(project=os.environ.get("WANDB_PROJECT") or "trainprof",
                                       name=run_name, reinit="create_new")
        self.run.define_metric(STEP_KEY, hidden=True)
        self.run.define_metric("trainprof/*", step_metric=STEP_KEY)
        self._files: list[Path] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if step is None:
            self.run.summary.update(metrics)
        else:
            self.run.log({**metrics, STEP_KEY: step})

    def log_findings(self, columns: tuple[str, ...], rows: list[list[Any]],
                     tags: dict[str, str]) -> None:
        self.run.log({"trainprof/findings": self.wandb.Table(columns=list(columns), data=rows)})
        self.run.tags = tuple(dict.fromkeys([*(self.run.tags or ()),
                                             *(f"trainprof:{k.rsplit('.', 1)[-1]}"
                                               for k in tags)]))

    def log_artifact(self, path: Path) -> None:
        self._files.append(path)  # one artifact holds them all, logged at close()

    def close(self) -> None:
        if self._files:
            artifact = self.wandb.Artifact(f"trainprof-{self.run.id}", type="trainprof")
            for path in self._files:
                artifact.add_file(str(path))
            self._files = []
            self.run.log_artifact(artifact)
        if self.owned:
            self.run.finish()
