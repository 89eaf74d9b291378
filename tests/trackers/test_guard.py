"""A failing tracker warns once, is turned off, and never raises into the caller."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from trainprof.trackers.base import Guarded, TrackerWarning  # noqa: E402
from trainprof.trackers.tensorboard_tracker import TensorBoardTracker  # noqa: E402


def test_the_first_failure_warns_once_and_the_rest_do_nothing(tmp_path):
    tracker = Guarded(TensorBoardTracker(tmp_path / "tb"))
    tracker.log_metrics({"trainprof/step_ms": 5.0}, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracker.log_artifact(Path(tmp_path / "missing.html"))  # no such file: it fails
        tracker.log_metrics({"trainprof/step_ms": 6.0}, 2)
        tracker.log_artifact(Path(tmp_path / "missing.html"))
        tracker.close()
    assert [w.category for w in caught] == [TrackerWarning]
    assert "logging to tensorboard failed" in str(caught[0].message)
    assert "FileNotFoundError" in str(caught[0].message)
    assert tracker.failed and tracker.tracker is None
