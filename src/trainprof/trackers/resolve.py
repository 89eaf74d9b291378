"""From what the user gives (``"mlflow"``, a W&B run, an Accelerator, a Lightning Trainer...) to
guarded trackers, reusing the run their code already has."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from trainprof.errors import TrainprofError
from trainprof.trackers import TRACKER_NAMES
from trainprof.trackers.base import Guarded, Tracker, TrackerWarning


def _by_name(name: str, run_name: str | None) -> Tracker:
    if name == "mlflow":
        from trainprof.trackers.mlflow_tracker import MlflowTracker

        return MlflowTracker(run_name=run_name)
    if name == "wandb":
        from trainprof.trackers.wandb_tracker import WandbTracker

        return WandbTracker(run_name=run_name)
    if name == "tensorboard":
        from trainprof.trackers.tensorboard_tracker import TensorBoardTracker

        return TensorBoardTracker()
    raise TrainprofError(f"unknown tracker {name!r}; choose from {', '.join(TRACKER_NAMES)}.")


def _logdir(writer: Any) -> Any:
    """The log folder of a TensorBoard writer or logger (torch's SummaryWriter, Lightning's)."""
    for attr in ("log_dir", "logdir"):
        value = getattr(writer, attr, None)
        if isinstance(value, str | bytes) or hasattr(value, "__fspath__"):
            return value
    get = getattr(writer, "get_logdir", None)
    return get() if callable(get) else None


def _from_object(target: Any) -> list[Tracker]:
    """Trackers for a run object, or for every tracker an Accelerator or a Trainer holds."""
    kind = type(target).__module__.split(".")[0] + "." + type(target).__name__
    if hasattr(target, "trackers") and hasattr(target, "get_tracker"):  # accelerate
        return [t for tr in target.trackers for t in _from_accelerate(tr)]
    if hasattr(target, "loggers") and hasattr(target, "fit"):  # Lightning Trainer
        return [t for lg in target.loggers for t in _from_object(lg)]
    name = type(target).__name__
    if name in ("WandbLogger",):
        from trainprof.trackers.wandb_tracker import WandbTracker

        return [WandbTracker(run=target.experiment)]
    if name in ("MLFlowLogger",):
        from trainprof.trackers.mlflow_tracker import MlflowTracker

        return [MlflowTracker(run_id=target.run_id, client=target.experiment)]
    if name in ("TensorBoardLogger", "SummaryWriter") and _logdir(target) is not None:
        from trainprof.trackers.tensorboard_tracker import TensorBoardTracker

        return [TensorBoardTracker(_logdir(target))]
    if kind.startswith("wandb.") and hasattr(target, "log"):  # a wandb Run
        from trainprof.trackers.wandb_tracker import WandbTracker

        return [WandbTracker(run=target)]
    run_id = getattr(getattr(target, "info", None), "run_id", None)
    if kind.startswith("mlflow.") and run_id:  # an mlflow ActiveRun
        from trainprof.trackers.mlflow_tracker import MlflowTracker

        return [MlflowTracker(run_id=run_id)]
    raise TrainprofError(f"log_to does not know {type(target).__name__}; give "
                         f"{', '.join(TRACKER_NAMES)}, a run, an Accelerator or a Trainer.")


def _from_accelerate(general: Any) -> list[Tracker]:
    """accelerate's GeneralTracker wraps the run (``.tracker``): log into that run."""
    name = getattr(general, "name", "")
    inner = getattr(general, "tracker", None)
    if name == "wandb":
        from trainprof.trackers.wandb_tracker import WandbTracker

        return [WandbTracker(run=inner)]
    if name == "mlflow":
        from trainprof.trackers.mlflow_tracker import MlflowTracker

        run = getattr(inner, "info", None)
        return [MlflowTracker(run_id=getattr(run, "run_id", None))]
    if name == "tensorboard" and _logdir(inner) is not None:
        from trainprof.trackers.tensorboard_tracker import TensorBoardTracker

        return [TensorBoardTracker(_logdir(inner))]
    return []


def open_trackers(targets: Iterable[Any] | str | None,
                  run_name: str | None = None) -> list[Guarded]:
    """Guarded trackers for ``targets``. A missing package is a ``TrainprofError`` (one
    sentence); a tracker that cannot start (no server) is a warning, and is left out."""
    if targets is None:
        return []
    if isinstance(targets, str) or not isinstance(targets, Iterable):
        targets = [targets]
    out: list[Guarded] = []
    for target in targets:
        try:
            made = [_by_name(target, run_name)] if isinstance(target, str) else \
                _from_object(target)
        except TrainprofError:
            raise
        except Exception as exc:  # the tracker's own failure: the run goes on without it
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            warnings.warn(f"could not start logging to {target}; the run goes on without it "
                          f"({type(exc).__name__}: {first[:160]})", TrackerWarning,
                          stacklevel=2)
            continue
        out.extend(Guarded(t) for t in made)
    return out
