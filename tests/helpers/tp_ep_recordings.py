"""The recorded tensor- and expert-parallel jobs (tests/analysis/jobs/tp_ep_jobs.py), once per
session. Test modules import the fixture (``from tp_ep_recordings import tp_ep_jobs``)."""

from __future__ import annotations

from helpers.job_recording import JOBS, session_recording

JOB = JOBS / "tp_ep_jobs.py"


tp_ep_jobs = session_recording(
    JOB, "tp_ep_jobs",
    "The folder holding ``tensor/`` and ``expert/``, each with ``rank0.json`` and "
    "``rank1.json``.")
