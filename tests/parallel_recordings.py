"""The recorded parallel jobs (tests/analysis/jobs/parallel_jobs.py), once per session, and a
small reference reading of their raw Chrome-trace JSON for the tests to check figures against.

Test modules import the fixture (``from parallel_recordings import parallel_jobs``); the
recording is cached in this module, so two test modules that import it share one recording.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JOB = Path(__file__).resolve().parent / "analysis" / "jobs" / "parallel_jobs.py"
_RECORDED: dict[str, Path] = {}


@pytest.fixture(scope="session")
def parallel_jobs(tmp_path_factory) -> Path:
    """The folder holding ``pipeline_heavy/``, ``pipeline_balanced/`` and ``fsdp/``, each with
    ``rank0.json`` and ``rank1.json``."""
    if "out" not in _RECORDED:
        out = tmp_path_factory.mktemp("parallel_jobs")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, str(JOB), str(out)], capture_output=True,
                              text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        _RECORDED["out"] = out
    return _RECORDED["out"]


def events(path: Path) -> list[dict[str, Any]]:
    """The complete events of a trace, sorted by start."""
    data = json.loads(path.read_text())
    return sorted((e for e in data["traceEvents"] if e.get("ph") == "X"), key=lambda e: e["ts"])


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping spans merged, one loop."""
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length_inside(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in spans)


def minus(a: list[tuple[float, float]], b: list[tuple[float, float]]
          ) -> list[tuple[float, float]]:
    """The spans of ``a`` (merged) outside ``b`` (merged), one pass per span."""
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def is_comm(e: dict[str, Any]) -> bool:
    return e["name"].startswith(("c10d::", "gloo:"))


def cpu_compute(ev: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """CPU ops that are not communication and call none (docs/parallelism.md), merged."""
    calls = [e for e in ev if e["cat"] == "cpu_op" and is_comm(e)]
    spans = []
    for e in ev:
        if e["cat"] != "cpu_op" or is_comm(e):
            continue
        end = e["ts"] + e["dur"]
        if not any(c["tid"] == e["tid"] and e["ts"] <= c["ts"] < end for c in calls):
            spans.append((e["ts"], end))
    return union(spans)


def comm_spans(ev: list[dict[str, Any]], names: tuple[str, ...] = ("c10d::", "gloo:")
               ) -> list[tuple[float, float]]:
    return union([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith(names)])


def profiler_steps(ev: list[dict[str, Any]]) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
