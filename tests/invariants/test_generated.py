"""Every property of tests/invariants/properties.py on traces Hypothesis builds
(tests/invariants/strategies.py). Kept to about 30 s: ``TRAINPROF_INVARIANT_EXAMPLES`` raises the
number of jobs for a longer run, and ``TRAINPROF_INVARIANT_RANDOM=1`` explores new examples
instead of the same ones every run (docs/invariants.md): a test suite that must pass on every
clone draws the same jobs each time; exploring is a separate, longer run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

import trainprof
from invariants.properties import check
from invariants.strategies import job, write_job

EXAMPLES = int(os.environ.get("TRAINPROF_INVARIANT_EXAMPLES", "60"))
RANDOM = os.environ.get("TRAINPROF_INVARIANT_RANDOM") == "1"


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not RANDOM,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(job())
def test_every_property_holds_on_generated_jobs(builders):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_job(builders, Path(tmp) / "job")
        check(trainprof.analyze(path))
