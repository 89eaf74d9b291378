"""The recorded DDP jobs (tests/analysis/jobs/ddp_straggler.py: a compute straggler and its
balanced control), once per session.

Test modules import the fixture (``from ddp_recordings import ddp_jobs``); the recording is
cached in this module, so two test modules that import it share one recording.
"""

from __future__ import annotations

import re

from helpers.job_recording import JOBS, session_recording

JOB = JOBS / "ddp_straggler.py"
#: The slow rank's extra compute per step, read from the job (importing it would import torch).
DELAY_S = float(re.search(r"^DELAY_S = ([0-9.]+)$", JOB.read_text(), re.M).group(1))


ddp_jobs = session_recording(
    JOB, "ddp_jobs",
    "The folder holding ``ddp_slow/`` and ``ddp_balanced/``, each with ``rank0.json`` and "
    "``rank1.json``.")
