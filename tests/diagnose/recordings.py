"""Fixtures that record the pathology runs: each runs once per session, on demand.

Test modules import the fixtures they use (``from recordings import recorded``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import trainprof
from trainprof.analysis.results import Analysis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads  # noqa: E402
from helpers.exclusive import alone  # noqa: E402

DDP_JOB = Path(__file__).resolve().parent / "jobs" / "ddp.py"
#: Options each in-process pathology is recorded with (memory events for the leak, Python
#: frames for the logging run so that the finding can name the function).
RECORD_OPTIONS = {"leak": {"profile_memory": True}, "logging": {"with_stack": True}}


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Callable[[str], Analysis]:
    """``recorded(kind)``: the analysis of one recording of a workloads.JOBS run."""
    cache: dict[str, Analysis] = {}

    def get(kind: str) -> Analysis:
        if kind not in cache:
            with alone():  # a healthy control's step variance is a figure under test
                out = workloads.record(kind, tmp_path_factory.mktemp(kind),
                                       **RECORD_OPTIONS.get(kind, {}))
            cache[kind] = trainprof.analyze(out)
        return cache[kind]

    return get


@pytest.fixture(scope="session")
def ddp(tmp_path_factory) -> Callable[[str], Analysis]:
    """``ddp(mode)``: the analysis of a two-rank gloo DDP run (jobs/ddp.py), once per mode."""
    cache: dict[str, Analysis] = {}

    def get(mode: str) -> Analysis:
        if mode not in cache:
            out = tmp_path_factory.mktemp(f"ddp_{mode}")
            torchrun = Path(sys.executable).parent / "torchrun"
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            with alone():
                done = subprocess.run(
                    [str(torchrun), "--standalone", "--nproc_per_node=2", str(DDP_JOB),
                     str(out), mode], capture_output=True, text=True, timeout=240, env=env)
            assert done.returncode == 0, done.stderr[-3000:]
            cache[mode] = trainprof.analyze(out)
        return cache[mode]

    return get
