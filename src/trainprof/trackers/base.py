"""The tracker interface, and the guard that turns a tracker's failure into one warning."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Protocol


class TrackerWarning(UserWarning):
    """A tracker failed (a server went away, a disk filled); the analysis or training went on."""


class Tracker(Protocol):
    """What trainprof asks of MLflow, W&B and TensorBoard alike."""

    name: str

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    def log_findings(self, columns: tuple[str, ...], rows: list[list[Any]],
                     tags: dict[str, str]) -> None: ...

    def log_artifact(self, path: Path) -> None: ...

    def close(self) -> None:
        """Flush; end the run only when trainprof started it."""


class Guarded:
    """A tracker whose first failure warns once and turns it off; nothing raises to the caller."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker: Tracker | None = tracker
        self.name = tracker.name
        self.failed = False

    def _call(self, method: str, *args: Any) -> None:
        if self.tracker is None:
            return
        try:
            getattr(self.tracker, method)(*args)
        except Exception as exc:  # any failure of a tracker costs a warning, never the run
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        tracker, self.tracker = self.tracker, None
        self.failed = True
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warnings.warn(f"logging to {self.name} failed and is off for the rest of the run "
                      f"({type(exc).__name__}: {first[:200]})", TrackerWarning, stacklevel=4)
        try:
            if tracker is not None:
                tracker.close()
        except Exception:  # noqa: S110 - already warned; closing a broken tracker may fail too
            pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self._call("log_metrics", metrics, step)

    def log_series(self, series: list[tuple[int, dict[str, float]]]) -> None:
        """Several steps at once: in one request where the tracker can (MLflow), else a step
        at a time."""
        if self.tracker is not None and hasattr(self.tracker, "log_series"):
            self._call("log_series", series)
            return
        for step, metrics in series:
            self.log_metrics(metrics, step)

    def log_findings(self, columns: tuple[str, ...], rows: list[list[Any]],
                     tags: dict[str, str]) -> None:
        self._call("log_findings", columns, rows, tags)

    def log_artifact(self, path: Path) -> None:
        self._call("log_artifact", path)

    def close(self) -> None:
        self._call("close")
        self.tracker = None
