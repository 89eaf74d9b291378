"""The recorded tensor- and expert-parallel jobs (tests/analysis/jobs/tp_ep_jobs.py), once per
session. Test modules import the fixture (``from tp_ep_recordings import tp_ep_jobs``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exclusive import alone

JOB = Path(__file__).resolve().parent / "analysis" / "jobs" / "tp_ep_jobs.py"
_RECORDED: dict[str, Path] = {}


@pytest.fixture(scope="session")
def tp_ep_jobs(tmp_path_factory) -> Path:
    """The folder holding ``tensor/`` and ``expert/``, each with ``rank0.json`` and
    ``rank1.json``."""
    if "out" not in _RECORDED:
        out = tmp_path_factory.mktemp("tp_ep_jobs")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with alone():  # the expert job's imbalance is a figure under test
            done = subprocess.run([sys.executable, str(JOB), str(out)], capture_output=True,
                                  text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        _RECORDED["out"] = out
    return _RECORDED["out"]
