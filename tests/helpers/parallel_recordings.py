"""The recorded parallel jobs (tests/analysis/jobs/parallel_jobs.py), once per session, and a
small reference reading of their raw Chrome-trace JSON for the tests to check figures against.

Test modules import the fixture (``from parallel_recordings import parallel_jobs``); the
recording is cached in this module, so two test modules that import it share one recording.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.job_recording import JOBS, session_recording

JOB = JOBS / "parallel_jobs.py"


parallel_jobs = session_recording(
    JOB, "parallel_jobs",
    "The folder holding ``pipeline_heavy/``, ``pipeline_balanced/`` and ``fsdp/``, each with "
    "``rank0.json`` and ``rank1.json``.")


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


def layer_of(name: str) -> str:
    """The module an FSDP2 range names: ``FSDP::pre_forward (4)`` and
    ``FSDP::forward_prefetch for 4`` -> ``4``."""
    if " for " in name:
        return name.rsplit(" for ", 1)[1]
    return name.rsplit(" (", 1)[1].rstrip(")")


def fsdp_waits(ev: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(layer, "forward" / "backward" / "reduce") -> µs the training thread waited with no
    compute running inside the layer's FSDP2 hooks over the step span (docs/parallelism.md):
    ``pre_forward``, ``pre_backward``, ``post_backward_*``; the waiting inside a prefetch range
    (``FSDP::backward_prefetch for L``) goes to the layer it gathers, not to the hook around it;
    ("", "reduce"): the root's ``FSDP::root_post_backward_callback`` waiting outside every other
    FSDP range (the last reduce-scatters)."""
    steps = profiler_steps(ev)
    lo, hi = steps[0][0], steps[-1][1]
    waiting = minus(comm_spans(ev), cpu_compute(ev))
    prefetch = [e for e in ev if e["name"].startswith("FSDP::") and "_prefetch for " in e["name"]]
    outside = minus(waiting, union([(e["ts"], e["ts"] + e["dur"]) for e in prefetch]))
    out: dict[tuple[str, str], float] = {}
    root = "FSDP::root_post_backward_callback"
    others = union([(e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e["name"].startswith("FSDP::") and e["name"] != root])
    out[("", "reduce")] = sum(length_inside(minus(waiting, others), e["ts"],
                                            min(e["ts"] + e["dur"], hi))
                              for e in ev if e["name"] == root and lo <= e["ts"] < hi)
    for e in ev:
        name = e["name"]
        if not name.startswith("FSDP::") or not (lo <= e["ts"] < hi) or name == root:
            continue
        hook = name.removeprefix("FSDP::").split(" ", 1)[0]
        figure = {"pre_forward": "forward", "pre_backward": "backward",
                  "forward_prefetch": "forward", "backward_prefetch": "backward"}.get(hook)
        if figure is None and hook.startswith("post_backward") and " (" in name:
            figure = "reduce"
        if figure is None:
            continue
        spans = waiting if hook.endswith("_prefetch") else outside
        key = (layer_of(name), figure)
        out[key] = out.get(key, 0.0) + length_inside(spans, e["ts"], min(e["ts"] + e["dur"], hi))
    return out


def prefetch_distances(ev: list[dict[str, Any]]) -> dict[tuple[str, str], list[int]]:
    """(layer, "forward" / "backward") -> the prefetch distance of each ``FSDP::all_gather (L)``
    in the step span: the other layers whose ``post_forward`` (``post_backward_*``) range
    starts after the all-gather is issued and by the end of the next ``pre_forward (L)``
    (``pre_backward (L)``); backward when the innermost FSDP range around it says so."""
    steps = profiler_steps(ev)
    lo, hi = steps[0][0], steps[-1][1]
    fsdp = [e for e in ev if e["name"].startswith("FSDP::")]
    out: dict[tuple[str, str], list[int]] = {}
    for g in fsdp:
        if not g["name"].startswith("FSDP::all_gather (") or not (lo <= g["ts"] < hi):
            continue
        layer, t = layer_of(g["name"]), g["ts"]
        around = [e for e in fsdp if not e["name"].startswith("FSDP::all_gather")
                  and e["tid"] == g["tid"] and e["ts"] <= t < e["ts"] + e["dur"]]
        inner = max(around, key=lambda e: e["ts"])["name"] if around else ""
        phase = "backward" if "backward" in inner else "forward"
        uses = sorted(e["ts"] + e["dur"] for e in fsdp
                      if e["name"] == f"FSDP::pre_{phase} ({layer})" and e["ts"] + e["dur"] >= t)
        if not uses:
            continue
        ends = "FSDP::post_forward (" if phase == "forward" else "FSDP::post_backward"
        between = {layer_of(e["name"]) for e in fsdp
                   if e["name"].startswith(ends) and " (" in e["name"] and t < e["ts"] <= uses[0]}
        out.setdefault((layer, phase), []).append(len(between - {layer}))
    return out
