"""Recording a two-rank gloo job of tests/analysis/jobs, once per test run, as a session fixture
(``session_recording``; parallel_recordings.py, ddp_recordings.py, tp_ep_recordings.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.exclusive import alone


def record(script: Path, out: Path) -> Path:
    """``python script OUT``, alone (its stages' and ranks' times are figures under test, which
    the other test worker's load would blur: tests/helpers/exclusive.py), one thread per rank's ops;
    ``out``, or the test fails with the end of the script's error."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with alone():
        done = subprocess.run([sys.executable, str(script), str(out)], capture_output=True,
                              text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


#: The job scripts' folder.
JOBS = Path(__file__).resolve().parents[1] / "analysis" / "jobs"


def session_recording(script: Path, name: str, doc: str) -> Callable[..., Any]:
    """A session fixture ``name``: the folder ``record`` wrote for ``script``. The
    recording is made once per process even where test modules import the fixture (each
    import is a fixture of its own to pytest)."""
    recorded: list[Path] = []

    @pytest.fixture(scope="session", name=name)
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
        if not recorded:
            recorded.append(record(script, tmp_path_factory.mktemp(name)))
        return recorded[0]

    fixture.__doc__ = doc
    return fixture
