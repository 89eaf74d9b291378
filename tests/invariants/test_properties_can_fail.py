"""Each property of the invariants suite rejects an analysis that breaks it: the analysis of a
real trace, with one contradiction planted in its JSON."""

from __future__ import annotations

import copy

import pytest

import trainprof
from invariants import properties as p

from helpers.paths import TIMESFORMER, TRACE_FILTER


@pytest.fixture(scope="module")
def job():
    a = trainprof.analyze(TRACE_FILTER)
    return a, p.json_of(a)


@pytest.fixture(scope="module")
def single():
    a = trainprof.analyze(TIMESFORMER)
    return a, p.json_of(a)


def _finding_with_saving(d):
    return next(f for f in d["findings"] if f["saving_pct"] > 1)


def _cpu_only(d):
    for r in d["ranks"]:
        r["gpus"] = []
        r["breakdown_pct"]["runtime"] = 0.0
    f = d["findings"][0]
    f["id"] = "communication_exposed"
    f["fix"]["summary"] += " Use NCCL on GPUs."


PLANTED = {
    "shares_in_range": lambda d: d["ranks"][0]["breakdown_pct"].update(kernel=120.0),
    "breakdown_adds_up": lambda d: d["ranks"][0]["breakdown_ms"].update(
        other=d["ranks"][0]["breakdown_ms"]["other"] + 5.0),
    "per_step_within_step": lambda d: d["ranks"][0]["compilation"]["compile_per_step_ms"][0]
    .__setitem__(1, d["ranks"][0]["steps"]["per_step"][0]["ms"] + 1.0),
    "timeline_consistent": lambda d: d["ranks"][0]["timeline"].update(
        idle_pct=d["ranks"][0]["timeline"]["idle_pct"] + 5.0),
    "rank_marks_consistent": lambda d: [r.update(mark="fastest")
                                        for r in d["job"]["rank_table"]["rows"]],
    "finding_saving_consistent": lambda d: _finding_with_saving(d).update(
        saving_ms=_finding_with_saving(d)["saving_ms"] * 2 + 1),
    "finding_fits_device": _cpu_only,
    "finding_text_agrees": lambda d: _finding_with_saving(d).update(
        saving_assumption="per sample (it does not shorten a step)"),
    "verdict_matches_breakdown": lambda d: (d.update(findings=[]),
                                            d["ranks"][0]["breakdown_pct"].update(runtime=60.0)),
    "compilation_adds_up": lambda d: d["ranks"][0]["compilation"].update(first_ms=1.0),
    "renders": lambda d: d.update(planted=float("nan")),
    "path_agrees_with_timeline": lambda d: (
        d["ranks"][0]["timeline"].update(busy_pct=99.0, idle_pct=1.0),
        d["ranks"][0]["critical_path"]["split_pct"].update(
            gpu_compute=10.0, gpu_communication=0.0, copies=0.0, host_compute=5.0,
            data_loading=0.0, untraced_host=85.0)),
}


@pytest.mark.parametrize("prop", [x for x in p.PROPERTIES if x.__name__ in PLANTED],
                         ids=lambda x: x.__name__)
def test_property_rejects_a_planted_contradiction(job, prop):
    a, d = job
    prop(a, d)  # the real analysis passes
    broken = copy.deepcopy(d)
    PLANTED[prop.__name__](broken)
    with pytest.raises(AssertionError):
        prop(a, broken)


def test_memory_property_rejects_a_curve_above_the_peak(single):
    a, d = single
    p.memory_consistent(a, d)
    broken = copy.deepcopy(d)
    device = broken["ranks"][0]["memory"]["devices"][0]
    device["curve"]["allocated"].append(device["peak_allocated"] + 1e6)
    with pytest.raises(AssertionError):
        p.memory_consistent(a, broken)


def test_every_property_has_a_planted_contradiction():
    assert {x.__name__ for x in p.PROPERTIES} == set(PLANTED) | {"memory_consistent"}
