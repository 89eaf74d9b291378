"""Checks shared by the windowed-section tests: every shared trace, cut into windows of 1, 2
and 3 steps, gives the in-memory result, which is the section's result from before it streamed
(kept in windowed_golden/, written by the old code)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.streaming.windows import WindowedSection, windows_of
from trainprof.trace.load import load_file
from trainprof.trace.model import Trace

from helpers.paths import SHARED, SHARED_TRACE_FILES

GOLDEN = Path(__file__).resolve().parent / "windowed_golden"
#: Steps per window the tests cut traces into.
PER_WINDOW = (1, 2, 3)
REL = 1e-9


def shared_traces() -> list[tuple[str, Trace, StepWindows]]:
    """(name under shared/traces, trace, steps) of every shared trace."""
    out = []
    for path in SHARED_TRACE_FILES:
        trace = load_file(str(path))
        out.append((str(path.relative_to(SHARED)), trace, find_steps(trace)))
    return out


def golden(section: str) -> dict[str, Any]:
    """The section's ``to_dict()`` per shared trace, from the code before it streamed."""
    with gzip.open(GOLDEN / f"{section}.json.gz", "rt") as f:
        return json.load(f)


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON-like values differ (floats within a relative REL)."""
    if isinstance(a, float) or isinstance(b, float):
        numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
        if numbers and ((math.isnan(a) and math.isnan(b))
                        or math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)):
            return []
        return [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a.keys() ^ b.keys())}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def as_json(result: Any) -> Any:
    """A result's ``to_dict()`` as JSON reads it back (tuples become lists)."""
    return json.loads(json.dumps(result.to_dict()))


def check_every_trace(section: WindowedSection, name: str,
                      traces: list[tuple[str, Trace, StepWindows]]) -> int:
    """Assert, per shared trace, whole == golden and windowed == whole; the windows cut."""
    expected = golden(name)
    assert sorted(expected) == sorted(t[0] for t in traces)
    cut = 0
    for key, trace, steps in traces:
        whole = as_json(section(trace, steps))
        assert not differences(whole, expected[key]), (key, differences(whole, expected[key]))
        for per in PER_WINDOW:
            windows = windows_of(trace, steps, per)
            cut += len(windows) > 1
            got = as_json(section.over(windows, steps))
            diff = differences(got, whole)
            assert not diff, (key, per, diff[:5])
    return cut
