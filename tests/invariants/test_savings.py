"""Savings never exceed the step, one cause has one saving, and severity follows the saving
(issue 25; docs/rules.md#savings): on every shared trace, the two-rank folder as one job, and
jobs Hypothesis builds (tests/invariants/strategies.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import trainprof
from invariants.strategies import job, write_job
from trainprof.analysis.results import Analysis
from trainprof.diagnose.findings import RISK_SEVERITY, SAVING_SEVERITY
from trainprof.diagnose.path_bounds import BOUNDS, CAP_TOLERANCE_PCT
from trainprof.diagnose.savings import SAME_TIME
from trainprof.vocabulary import SEVERITY_ORDER

from helpers.paths import SHARED_TRACE_FILES, TRACE_FILTER

TRACES = [*SHARED_TRACE_FILES, TRACE_FILTER]
EXAMPLES = int(os.environ.get("TRAINPROF_INVARIANT_EXAMPLES", "12"))
#: Savings are compared after rounding; to_dict keeps two decimals.
TOL = 0.011


@pytest.fixture(scope="module")
def analyses() -> dict[Path, Analysis]:
    return {p: trainprof.analyze(p) for p in TRACES}


def distinct_savings_fit_in_the_step(a: Analysis) -> None:
    """On each rank and window, the savings not shared with an earlier finding add up to at
    most 100% of the step."""
    sums: dict[tuple, float] = {}
    for f in a.findings:
        if "saving_shared_with" not in f.extra:
            key = (f.rank, f.window)
            sums[key] = sums.get(key, 0.0) + f.saving_pct
    assert all(s <= 100.0 + TOL for s in sums.values()), sums


def shared_savings_name_an_earlier_finding_on_the_same_time(a: Analysis) -> None:
    """A shared saving names a finding reported before it, on its rank and window, that the
    table pairs it with, and saves no more than that one."""
    position = {f.id: i for i, f in enumerate(a.findings)}
    for i, f in enumerate(a.findings):
        other = f.extra.get("saving_shared_with")
        if other is None:
            continue
        first = a.findings[position[other]]
        assert position[other] < i, (f.id, other)
        assert (first.rank, first.window) == (f.rank, f.window), (f.id, other)
        assert frozenset((f.id, other)) in SAME_TIME, (f.id, other)
        assert f.saving_pct <= first.saving_pct + TOL, (f.id, f.saving_pct, first.saving_pct)


def savings_within_the_critical_path(a: Analysis) -> None:
    """A finding whose work is on the path saves no more than that work's time on it (its
    categories' share of the path's steps, in ms, over the rank's mean step)."""
    ranks = {(r.rank, r.window): r for r in a.ranks}
    for f in a.findings:
        r = ranks.get((f.rank, f.window))
        path = r.sections.critical_path if r is not None else None
        if f.id not in BOUNDS or path is None or not path.steps or r.findings is not None:
            continue
        comm = r.sections.communication
        b = BOUNDS[f.id]
        host = comm is not None and comm.source == "host ops" and b.on_host is not None
        categories = b.on_host if host else b.categories
        on_path_us = sum(s.split_us.get(c, 0.0) for s in path.steps
                         for c in categories or ()) / len(path.steps)
        bound = on_path_us / 1000 / r.steps.mean_ms * 100
        assert f.saving_pct <= bound + CAP_TOLERANCE_PCT + TOL, (f.id, f.saving_pct, bound)


def severity_follows_the_saving(a: Analysis) -> None:
    """Every severity is its saving's by the one table, except the risk rules'."""
    for f in a.findings:
        if f.id in RISK_SEVERITY:
            continue
        expected = next((sev for at, sev in SAVING_SEVERITY if f.saving_pct >= at), "low")
        assert f.severity == expected, (f.id, f.saving_pct, f.severity)


PROPERTIES = [distinct_savings_fit_in_the_step,
              shared_savings_name_an_earlier_finding_on_the_same_time,
              savings_within_the_critical_path, severity_follows_the_saving]


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__)
def test_savings_hold_on_every_shared_trace(analyses, prop):
    for path, a in analyses.items():
        try:
            prop(a)
        except AssertionError as e:
            raise AssertionError(f"{path.name}: {e}") from e


def test_a_larger_saving_never_has_a_lower_severity_across_shared_traces(analyses):
    """Over all findings of all shared traces (risk rules aside), sorted by saving, the
    severity never goes up as the saving goes down."""
    found = sorted(((f.saving_pct, SEVERITY_ORDER[f.severity], f.id, p.name)
                    for p, a in analyses.items() for f in a.findings
                    if f.id not in RISK_SEVERITY), reverse=True)
    for larger, smaller in zip(found, found[1:], strict=False):
        assert larger[1] <= smaller[1], (larger, smaller)


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(job())
def test_savings_hold_on_generated_jobs(builders):
    with tempfile.TemporaryDirectory() as tmp:
        a = trainprof.analyze(write_job(builders, Path(tmp) / "job"))
    for prop in PROPERTIES:
        prop(a)
