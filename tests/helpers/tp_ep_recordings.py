"""The recorded tensor- and expert-parallel jobs (tests/analysis/jobs/tp_ep_jobs.py), once per
session. Test modules import the fixture (``from tp_ep_recordings import tp_ep_jobs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.job_recording import record

JOB = Path(__file__).resolve().parents[1] / "analysis" / "jobs" / "tp_ep_jobs.py"
_RECORDED: dict[str, Path] = {}


@pytest.fixture(scope="session")
def tp_ep_jobs(tmp_path_factory) -> Path:
    """The folder holding ``tensor/`` and ``expert/``, each with ``rank0.json`` and
    ``rank1.json``."""
    if "out" not in _RECORDED:
        _RECORDED["out"] = record(JOB, tmp_path_factory.mktemp("tp_ep_jobs"))
    return _RECORDED["out"]
