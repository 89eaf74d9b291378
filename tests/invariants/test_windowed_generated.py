"""Idle, copies, memory, communication and syncs streamed window by window equal the whole
trace's figures on traces Hypothesis builds (tests/invariants/strategies.py), within what a
window's one step of margin can see: traces where some work reaches from before a step's margin
into it, a step is empty, or host ranges on a thread overlap without nesting, are left out (docs/idle.md and the other
sections' pages say what a window cannot see). Floats agree within a relative 1e-9 or 1e-9 µs."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, assume, given, settings

from analysis.test_windowed_activity import SECTIONS, streamed
from invariants.strategies import job
from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.trace.load import load_file
from trainprof.trace.model import DEVICE_KINDS, Trace

EXAMPLES = int(os.environ.get("TRAINPROF_WINDOWED_EXAMPLES", "60"))


def _within_margin(trace: Trace, steps: StepWindows) -> bool:
    """No work reaches from before a step's margin (the step before it) into it, no step is
    empty, and host ranges nest on each thread."""
    ev = trace.events
    if (steps.durations <= 0).any():
        return False
    for i in range(2, len(steps)):
        if ((ev.ts < steps.starts[i - 1]) & (ev.end > steps.starts[i])).any():
            return False
    host = np.flatnonzero(~ev.of_kind(*DEVICE_KINDS) & (ev.dur > 0))
    for tid in np.unique(ev.tid[host]).tolist():
        mine = host[ev.tid[host] == tid]
        open_ends: list[float] = []
        for i in mine[np.lexsort((-ev.dur[mine], ev.ts[mine]))].tolist():
            while open_ends and open_ends[-1] <= ev.ts[i]:
                open_ends.pop()
            if open_ends and ev.end[i] > open_ends[-1]:
                return False
            open_ends.append(float(ev.end[i]))
    return True


def _close(a: Any, b: Any, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float | int) and not isinstance(b, bool):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9,
                                                                 abs_tol=1e-9), where
    else:
        assert a == b, where


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(job())
def test_streamed_sections_equal_whole_on_generated_traces(builders):
    with tempfile.TemporaryDirectory() as tmp:
        trace = load_file(builders[0].write(Path(tmp) / "rank0.json"))
    steps = find_steps(trace)
    assume(_within_margin(trace, steps))
    for name, section in SECTIONS.items():
        whole = section(trace, steps).to_dict()
        for per in (1, 2):
            _close(streamed(section, trace, steps, per).to_dict(), whole, f"{name} per={per}")
