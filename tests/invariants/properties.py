"""The properties every analysis must have, whatever the trace: each a function of the analysis
and its JSON that raises AssertionError with what contradicted what.

PROPERTIES lists them; tests/invariants/test_*.py run all of them on every shared trace and on
generated ones.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from typing import Any

from rich.console import Console

from trainprof.analysis.results import Analysis
from trainprof.diagnose.registry import FINDING_IDS
from trainprof.report.json import to_json_bytes
from trainprof.report.terminal.report import print_analysis

#: Absolute tolerances: ms figures are sums of float µs; shares are percentages.
MS_TOL = 1e-3
PCT_TOL = 1e-6
#: Keys holding a share that is, by definition, in [0, 100].
_SHARE_WORDS = ("pct",)
#: Keys with "pct" that are not shares of a whole and may pass 100 on purpose: the spread of
#: the ranks' steps is (slowest - fastest) / median (a rank twice as slow is 100%).
_SHARES_ABOVE_100: frozenset[str] = frozenset({"step_spread_pct"})
#: Findings only a GPU can have (their fixes speak of kernels, SMs, Tensor Cores, CUDA graphs).
GPU_ONLY = frozenset({"low_occupancy", "no_tensor_cores", "attention_not_fused", "small_kernels",
                      "host_bound"})
#: Breakdown categories that are a bottleneck when they hold most of the step: a report with no
#: finding then contradicts its own breakdown. (Communication is judged by its exposed share
#: instead: a collective on another thread under compute is no bottleneck.)
_BOTTLENECK_CATEGORIES = ("runtime", "dataloader", "memcpy")
_DOMINANT_PCT = 50.0

Property = Callable[[Analysis, dict[str, Any]], None]


def _numbers(o: Any, path: str = "", parent: str = ""):
    """(path, key, number) for every number in a JSON value; a number in a dict of shares
    (``breakdown_pct``) is keyed by that dict's name."""
    if isinstance(o, dict):
        for k, v in o.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                yield f"{path}.{k}", (parent if "pct" in parent else str(k)), v
            else:
                yield from _numbers(v, f"{path}.{k}", str(k))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _numbers(v, f"{path}[{i}]", parent)


def _steps_ms(rank: dict[str, Any]) -> dict[int, float]:
    return {int(p["step"]): float(p["ms"]) for p in rank["steps"]["per_step"]}


def shares_in_range(a: Analysis, d: dict[str, Any]) -> None:
    """Every share (a key with "pct") is a finite number in [0, 100]."""
    for path, key, v in _numbers(d):
        if any(w in key for w in _SHARE_WORDS) and key not in _SHARES_ABOVE_100:
            assert math.isfinite(v) and -PCT_TOL <= v <= 100 + PCT_TOL, f"{path} = {v}"


def breakdown_adds_up(a: Analysis, d: dict[str, Any]) -> None:
    """The step-time breakdown and the phases each add up to the step (100%, the mean ms)."""
    for r in d["ranks"]:
        mean = r["steps"]["mean_ms"]
        if not r["steps"]["count"] or mean <= 0:
            continue
        for pct, ms in (("breakdown_pct", "breakdown_ms"), ("phases_pct", "phases_ms")):
            if not r[pct]:
                continue
            assert math.isclose(sum(r[pct].values()), 100.0, abs_tol=1e-3), (pct, r[pct])
            assert math.isclose(sum(r[ms].values()), mean, rel_tol=1e-6, abs_tol=MS_TOL), \
                (ms, r[ms], mean)


def per_step_within_step(a: Analysis, d: dict[str, Any]) -> None:
    """No per-step quantity is longer than its step, and no mean per step longer than the
    mean step; the step summary is ordered (min <= median, mean <= max)."""
    for r in d["ranks"]:
        s = r["steps"]
        steps = _steps_ms(r)
        if not steps:
            continue
        assert s["min_ms"] - MS_TOL <= s["median_ms"] <= s["max_ms"] + MS_TOL, s
        assert s["min_ms"] - MS_TOL <= s["mean_ms"] <= s["max_ms"] + MS_TOL, s
        c = r.get("compilation")
        if c:
            for key in ("compile_per_step_ms", "untraced_per_step_ms"):
                for step, ms in c[key]:
                    assert ms <= steps[step] + MS_TOL, (key, step, ms, steps[step])
        host = r.get("host")
        if host:
            for p in host["after_optimizer_per_step_ms"]:
                assert p["ms"] <= steps[p["step"]] + MS_TOL, ("after_optimizer", p)
            parts = [v for v in host["ms_per_step"].values() if v is not None]
            assert sum(parts) <= s["mean_ms"] + MS_TOL, ("host parts", host["ms_per_step"])
        comm = r.get("communication")
        if comm and comm.get("per_step_ms"):
            for (step, step_ms), ms in zip(steps.items(), comm["per_step_ms"], strict=True):
                assert ms <= step_ms + MS_TOL, ("communication", step, ms, step_ms)
            # One collective type's time is part of all communication's (a union), which is
            # part of the window (time_pct <= 100, checked with the shares).
            for t in comm.get("types", []):
                assert t["busy_ms_per_step"] <= comm["ms_per_step"] + MS_TOL, ("collective", t)
        _waits_within_steps(d)
        syncs = r.get("syncs")
        if syncs and syncs.get("per_step"):
            for p in syncs["per_step"]:
                if isinstance(p, dict) and "blocked_ms" in p and p.get("step") in steps:
                    assert p["blocked_ms"] <= steps[p["step"]] + MS_TOL, ("syncs", p)


def _waits_within_steps(d: dict[str, Any]) -> None:
    """A rank waits in collectives no longer per step than its longest step (the gloo job
    whose rank "waited 51.8 ms per step" in 33 ms steps), nor causes more wait than the others'
    longest step."""
    s = (d.get("job") or {}).get("stragglers")
    if not s or not s.get("ranks"):
        return
    longest = {r["rank"]: max(_steps_ms(r).values(), default=0.0) for r in d["ranks"]}
    for w in s["ranks"]:
        assert w["waited_ms_per_step"] <= longest[w["rank"]] + MS_TOL, ("waited", w)
        others = max((v for k, v in longest.items() if k != w["rank"]), default=0.0)
        assert w["caused_wait_ms_per_step"] <= others + MS_TOL, ("caused", w)


def timeline_consistent(a: Analysis, d: dict[str, Any]) -> None:
    """Busy and idle make the whole window; compute and communication fit in busy; exposed
    parts fit in their whole."""
    for r in d["ranks"]:
        t = r.get("timeline")
        if not t:
            continue
        assert math.isclose(t["busy_pct"] + t["idle_pct"], 100.0, abs_tol=1e-3), t
        assert t["compute_pct"] <= t["busy_pct"] + 1e-3, t
        assert t["exposed_communication_pct"] <= t["communication_pct"] + 1e-3, t
        assert t["exposed_memcpy_pct"] <= t["memcpy_pct"] + 1e-3, t
        gpu = r.get("gpu")
        if gpu:
            assert gpu["utilization_pct"] <= t["busy_pct"] + 1e-3, (gpu, t)


def rank_marks_consistent(a: Analysis, d: dict[str, Any]) -> None:
    """One slowest and one fastest rank at most, never the same, each the extreme of its
    column, and the straggler never called fastest."""
    table = (d.get("job") or {}).get("rank_table")
    if not table:
        return
    rows = table["rows"]
    marks = {m: [r for r in rows if r["mark"] == m] for m in ("slowest", "fastest")}
    assert len(marks["slowest"]) <= 1 and len(marks["fastest"]) <= 1, marks
    timed = [r["step_ms"] for r in rows if r["steps"]]
    if marks["slowest"]:
        assert marks["slowest"][0]["step_ms"] == max(timed)
        assert table["slowest"] == marks["slowest"][0]["rank"]
    if marks["fastest"]:
        assert marks["fastest"][0]["step_ms"] == min(timed)
        assert table["fastest"] == marks["fastest"][0]["rank"]
        assert not marks["slowest"] or marks["slowest"][0]["rank"] != table["fastest"]
    straggler = ((d.get("job") or {}).get("stragglers") or {}).get("straggler")
    if straggler is not None:
        assert table["fastest"] != straggler, ("straggler marked fastest", straggler)


def _rank_step(d: dict[str, Any], f: dict[str, Any]) -> float | None:
    """The step a finding's saving is a share of: its rank's mean step, or for a straggler the
    job's median step (its evidence "median step"; docs/rules.md#straggler)."""
    if f["id"] == "straggler":
        return next(e["value"] for e in f["evidence"] if e["what"] == "median step")
    for r in d["ranks"]:
        if r["rank"] == f["rank"] and r["window"] == f.get("window", 0):
            return r["steps"]["mean_ms"]
    return None


def finding_saving_consistent(a: Analysis, d: dict[str, Any]) -> None:
    """A finding's saving is in [0, 100]% of the step and its ms are that share of its rank's
    mean step; ids are known and unique; severities are known."""
    ids = [f["id"] for f in d["findings"]]
    assert len(ids) == len(set(ids)), ids
    for f in d["findings"]:
        assert f["id"] in FINDING_IDS, f["id"]
        assert f["severity"] in ("high", "medium", "low"), f
        assert 0.0 <= f["saving_pct"] <= 100.0, f
        assert f["saving_ms"] >= 0.0, f
        step = _rank_step(d, f) if f["rank"] is not None else None
        if step is not None and step > 0 and "saving_ms" in f:
            expected = step * f["saving_pct"] / 100.0
            # to_dict rounds the % to 2 decimals and the ms to 3.
            assert math.isclose(f["saving_ms"], expected, abs_tol=step * 0.006 + 0.002), \
                (f["id"], f["saving_ms"], expected)
            assert f["saving_ms"] <= step + 0.002, (f["id"], f["saving_ms"], step)


def finding_fits_device(a: Analysis, d: dict[str, Any]) -> None:
    """No GPU finding on a CPU-only rank, and no fix that names NCCL, CUDA graphs or Tensor
    Cores for a rank without a GPU (the gloo job told to use "NCCL on GPUs")."""
    # A rank that calls the CUDA API runs on a GPU even when its trace holds no device events.
    gpu_ranks = {(r["rank"], r["window"]) for r in d["ranks"]
                 if r.get("gpus") or r["breakdown_pct"].get("runtime", 0.0) > 0}
    for f in d["findings"]:
        if f["rank"] is None or (f["rank"], f.get("window", 0)) in gpu_ranks:
            continue
        assert f["id"] not in GPU_ONLY, ("GPU finding on a CPU-only rank", f["id"])
        fix = " ".join(f["fix"].values())
        for word in ("NCCL", "CUDA graphs", "Tensor Core"):
            assert word not in fix, (f["id"], word, fix)


def finding_text_agrees(a: Analysis, d: dict[str, Any]) -> None:
    """A card never says both a saving and that nothing gets shorter, nor that the memory
    allows something while the peak is unknown."""
    for f in d["findings"]:
        text = " ".join([f["title"], f["explanation"], f["saving_assumption"],
                         *f["fix"].values()])
        if f["saving_pct"] > 0:
            assert "does not shorten" not in text, (f["id"], text)
        if "memory allows" in text:
            assert not any(str(e["value"]) == "unknown" and "memory" in e["what"]
                           for e in f["evidence"]), (f["id"], f["evidence"])


def verdict_matches_breakdown(a: Analysis, d: dict[str, Any]) -> None:
    """"No major bottleneck" is never said of a step that a bottleneck category (CUDA API
    calls, data loading, copies) or exposed communication holds for more than half."""
    if d["findings"]:
        return
    for r in d["ranks"]:
        for c in _BOTTLENECK_CATEGORIES:
            assert r["breakdown_pct"].get(c, 0.0) <= _DOMINANT_PCT, \
                ("no finding, yet", c, r["breakdown_pct"][c])
        comm, mean = r.get("communication"), r["steps"]["mean_ms"]
        if comm and mean > 0:
            exposed = comm["exposed_ms_per_step"] / mean * 100
            assert exposed <= _DOMINANT_PCT, ("no finding, yet exposed communication", exposed)


def memory_consistent(a: Analysis, d: dict[str, Any]) -> None:
    """The peak is the highest point of the curve and of every step end; reserved at the peak
    holds what is allocated; the device share is the peak over the device's memory."""
    for r in d["ranks"]:
        for m in (r.get("memory") or {}).get("devices", []):
            peak = m.get("peak_allocated")
            if peak is None:
                continue
            curve = (m.get("curve") or {}).get("allocated") or []
            if curve:
                assert max(curve) <= peak + 1, ("curve above the peak", max(curve), peak)
            for p in m.get("step_end_allocated", []):
                assert p["allocated"] <= peak + 1, ("step end above the peak", p, peak)
            if m.get("reserved_at_peak") is not None:
                assert m["reserved_at_peak"] + 1 >= peak, m
            if m.get("device_total"):
                assert math.isclose(m["peak_pct_of_device"], peak / m["device_total"] * 100,
                                    rel_tol=1e-6), m


#: Where the device is busy at least this share of the steps (%), the critical path's device
#: share is at least the busy share less PATH_SLACK_PCT points, unless recorded host work the
#: device waited for (host compute, data loading) is on the path instead.
PATH_BUSY_PCT = 95.0
PATH_SLACK_PCT = 15.0
_PATH_DEVICE = ("gpu_compute", "gpu_communication", "copies")
_PATH_RECORDED_HOST = ("host_compute", "data_loading")


def path_agrees_with_timeline(a: Analysis, d: dict[str, Any]) -> None:
    """A device busy >= 95% of the steps is on the critical path: its device share is at least
    busy - 15 points, but for recorded host work the device waited for (the H800 step whose path
    called 59.6% of a 99.2%-busy step untraced host time)."""
    for r in d["ranks"]:
        t, cp = r.get("timeline"), r.get("critical_path")
        if not t or not cp or not cp.get("steps") or t["busy_pct"] < PATH_BUSY_PCT:
            continue
        split = cp["split_pct"]
        device = sum(split.get(k, 0.0) for k in _PATH_DEVICE)
        host = sum(split.get(k, 0.0) for k in _PATH_RECORDED_HOST)
        assert device + host >= t["busy_pct"] - PATH_SLACK_PCT, \
            ("path off the busy device", t["busy_pct"], split)


def compilation_adds_up(a: Analysis, d: dict[str, Any]) -> None:
    """First compilations and recompilations add up to the compile time, which is the sum of
    its steps."""
    for r in d["ranks"]:
        c = r.get("compilation")
        if not c or not c["steps"]:
            continue
        assert math.isclose(c["first_ms"] + c["recompile_ms"], c["compile_ms"],
                            rel_tol=1e-6, abs_tol=MS_TOL), c
        per_step = sum(ms for _, ms in c["compile_per_step_ms"]) / c["steps"]
        assert math.isclose(per_step, c["compile_ms"], rel_tol=1e-6, abs_tol=MS_TOL), c
        assert set(c["steps_compiling"]) == {s for s, ms in c["compile_per_step_ms"] if ms > 0}


def renders(a: Analysis, d: dict[str, Any]) -> None:
    """The text report renders, and the JSON round-trips as the same document."""
    console = Console(record=True, width=100, file=io.StringIO())
    print_analysis(a, console)
    text = console.export_text()
    if not a.findings:
        assert "No major bottleneck found" in text
    assert json.loads(json.dumps(d)) == d


PROPERTIES: list[Property] = [
    shares_in_range, breakdown_adds_up, per_step_within_step, timeline_consistent,
    rank_marks_consistent, finding_saving_consistent, finding_fits_device,
    finding_text_agrees, verdict_matches_breakdown, memory_consistent, compilation_adds_up,
    path_agrees_with_timeline, renders,
]


def json_of(a: Analysis) -> dict[str, Any]:
    return json.loads(to_json_bytes(a))


def check(a: Analysis) -> None:
    """Every property, on one analysis."""
    d = json_of(a)
    for prop in PROPERTIES:
        prop(a, d)
