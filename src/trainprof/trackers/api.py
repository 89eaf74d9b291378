"""``trainprof.log_analysis``: an analysis to MLflow, W&B or TensorBoard from Python."""

from __future__ import annotations

from typing import Any

from trainprof.trackers.log import log_analysis as _log
from trainprof.trackers.resolve import open_trackers


def log_analysis(analysis: Any, log_to: Any, *, run_name: str | None = None,
                 artifacts: bool = True) -> list[str]:
    """Log ``analysis`` to ``log_to``: "mlflow", "wandb", "tensorboard", a run (``wandb.run``,
    ``mlflow.active_run()``), an Accelerator or a Lightning Trainer, or a list of them. The run
    the code already has is reused. Returns the trackers that took everything; one that failed
    gave a ``TrackerWarning`` instead of an error (docs/trackers.md)."""
    trackers = open_trackers(log_to, run_name=run_name)
    _log(analysis, trackers, artifacts=artifacts)
    return [t.name for t in trackers if not t.failed]
