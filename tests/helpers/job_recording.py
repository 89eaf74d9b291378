"""Recording a two-rank gloo job of tests/analysis/jobs for the session fixtures
(parallel_recordings.py, ddp_recordings.py, tp_ep_recordings.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
