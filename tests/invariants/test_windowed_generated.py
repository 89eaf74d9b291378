"""Idle, copies, memory, communication and syncs streamed window by window equal the whole
trace's figures on traces Hypothesis builds (tests/invariants/strategies.py): odd values
included (zero-length events and steps, steps that touch, work past a step's end). The examples
are fixed (derandomized) so that the suite gives the same answer on every run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from analysis.test_windowed_activity import SECTIONS, same, streamed
from invariants.strategies import job
from trainprof.analysis.steps import find_steps
from trainprof.trace.load import load_file

EXAMPLES = int(os.environ.get("TRAINPROF_WINDOWED_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(job())
def test_streamed_sections_equal_whole_on_generated_traces(builders):
    with tempfile.TemporaryDirectory() as tmp:
        trace = load_file(builders[0].write(Path(tmp) / "rank0.json"))
    steps = find_steps(trace)
    for name, section in SECTIONS.items():
        whole = section(trace, steps).to_dict()
        for per in (1, 2):
            same(streamed(section, trace, steps, per).to_dict(), whole, f"{name} per={per}")
