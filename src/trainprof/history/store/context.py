"""Where a run happened: the git commit, the host, the job it belongs to, and a default name."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

#: CI systems' variables for the commit being built, read when there is no git checkout here.
COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT")
GIT_TIMEOUT_S = 5.0
_TRACE_SUFFIXES = (".gz", ".json", ".trace", ".pt")


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The commit checked out in ``cwd`` (this folder by default), else a CI variable's, else None."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=False)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return next((os.environ[v] for v in COMMIT_VARIABLES if os.environ.get(v)), None)


def host() -> str:
    return socket.gethostname()


def job_key() -> str | None:
    """What the ranks of one job share, so that their rows count as one point of a trend.

    torchrun's run id (unless it is the default ``none``), else SLURM's job and step, else,
    under a launcher with several processes on this machine, the launcher's process on this
    host; None for a single process.
    """
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}"
    if os.environ.get("SLURM_JOB_ID"):
        return f"slurm:{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    world = os.environ.get("WORLD_SIZE", "")
    if world.isdigit() and int(world) > 1:
        return f"local:{host()}:{os.getppid()}"
    return None


def default_name(source: str | os.PathLike[str] | None = None) -> str:
    """A run's name when none is given: the trace file or folder without its endings, else the
    script's name (``train`` for ``python train.py``)."""
    if source:
        name = Path(source).resolve().name
        while Path(name).suffix in _TRACE_SUFFIXES and Path(name).stem:
            name = Path(name).stem
        if name:
            return name
    script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else ""
    return script or "python"
