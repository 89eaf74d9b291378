"""What every rule shares: severity from thresholds, where a finding was measured, ms from %."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, Fix, Severity


def severity(value: float, medium: float, high: float) -> Severity:
    """high above ``high``, medium above ``medium``, else low. A provisional severity: the
    engine grades every finding by its final saving (findings.SAVING_SEVERITY,
    diagnose/savings.py), except the risk rules."""
    return "high" if value > high else "medium" if value > medium else "low"


def where(r: RankAnalysis, *more: str) -> str:
    """``rank 0`` (``, window 1`` for later windows), then any further details."""
    return ", ".join([f"rank {r.rank}" + (f", window {r.window}" if r.window else ""), *more])


def step_ms(r: RankAnalysis) -> float:
    return float(r.steps.mean_ms)


def ms_of(r: RankAnalysis, pct: float) -> float:
    """The mean ms per step that a share of the step time is."""
    return step_ms(r) * pct / 100.0


def pct_of(r: RankAnalysis, ms: float) -> float:
    """The share of the mean step that ``ms`` per step is."""
    return ms / step_ms(r) * 100.0 if step_ms(r) > 0 else 0.0


def total_step_us(r: RankAnalysis) -> float:
    """All recorded step time of the rank, in µs (for whole-trace sums of the sections)."""
    return float(sum(p["ms"] for p in r.steps.per_step)) * 1000.0


def share_of_steps(r: RankAnalysis, us: float) -> float:
    """A whole-trace time (µs) as a share of all step time, capped at 100%."""
    total = total_step_us(r)
    return min(us / total * 100.0, 100.0) if total > 0 else 0.0


def duration(what: str, us: float, where: str, per_step: bool = False) -> Evidence:
    """A time as evidence, in µs below a millisecond and in ms above."""
    unit = "ms" if us >= 1000 else "µs"
    suffix = "/step" if per_step else ""
    return Evidence(what, us / 1000 if unit == "ms" else us, unit + suffix, where)


def readable_us(us: float) -> str:
    return f"{us / 1000:.1f} ms" if us >= 1000 else f"{us:.0f} µs"


def step_evidence(r: RankAnalysis) -> Evidence:
    n = r.steps.count
    return Evidence("mean step time", step_ms(r), "ms", where(r, f"{n} step{'s' * (n != 1)}"))


def rank_finding(r: RankAnalysis, id: str, sev: Severity, title: str, explanation: str,
                 evidence: list[Evidence], saving_pct: float, assumption: str, fix: Fix,
                 **extra: Any) -> Finding:
    """A finding about one rank, its saving given as a share of the step. ``extra`` goes into
    the JSON as it is (``step``: the step it is seen at, for placing it on a timeline)."""
    saving_pct = max(0.0, min(saving_pct, 100.0))
    return Finding(id=id, severity=sev, rank=r.rank, window=r.window, title=title,
                   explanation=explanation, evidence=evidence, saving_pct=saving_pct,
                   saving_ms=ms_of(r, saving_pct), saving_assumption=assumption, fix=fix,
                   extra=dict(extra))


def straggler_waits(analysis: Analysis) -> dict[int, float]:
    """ms per step each rank waited in collectives for the named straggler (0 for the
    straggler itself; empty when none is named): the straggler finding's, left out of the
    waiting ranks' communication findings."""
    s = analysis.job.stragglers
    if s is None or s.straggler is None:
        return {}
    return {w.rank: (0.0 if w.rank == s.straggler else w.waited_ms_per_step) for w in s.ranks}



def less_straggler_waits(analysis: Analysis,
                         rule: Callable[[RankAnalysis, float], Finding | None]) -> list[Finding]:
    """``rule(rank, ms it waited for the named straggler)`` over the job's ranks: the findings of
    the communication rules, which leave the straggler's wait to the straggler finding."""
    waits = straggler_waits(analysis)
    return [f for r in analysis.ranks if (f := rule(r, waits.get(r.rank, 0.0))) is not None]
