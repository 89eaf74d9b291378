"""The recorded DDP jobs (tests/analysis/jobs/ddp_straggler.py: a compute straggler and its
balanced control), once per session.

Test modules import the fixture (``from ddp_recordings import ddp_jobs``); the recording is
cached in this module, so two test modules that import it share one recording.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.job_recording import record

JOB = Path(__file__).resolve().parents[1] / "analysis" / "jobs" / "ddp_straggler.py"
_RECORDED: dict[str, Path] = {}
#: The slow rank's extra compute per step, read from the job (importing it would import torch).
DELAY_S = float(re.search(r"^DELAY_S = ([0-9.]+)$", JOB.read_text(), re.M).group(1))


@pytest.fixture(scope="session")
def ddp_jobs(tmp_path_factory) -> Path:
    """The folder holding ``ddp_slow/`` and ``ddp_balanced/``, each with ``rank0.json`` and
    ``rank1.json``."""
    if "out" not in _RECORDED:
        _RECORDED["out"] = record(JOB, tmp_path_factory.mktemp("ddp_jobs"))
    return _RECORDED["out"]
