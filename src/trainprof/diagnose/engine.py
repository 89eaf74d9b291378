"""Run every rule over an analysis, fold repeats across ranks, rank by estimated saving."""

from __future__ import annotations

from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, Findings, ranked
from trainprof.diagnose.modules import name_modules
from trainprof.diagnose.path_bounds import cap_savings
from trainprof.diagnose.rules import JOB_RULES, RANK_RULES


def diagnose(analysis: Analysis) -> list[Finding]:
    """The findings for every rank and the job, one per id, sorted by estimated saving."""
    per_rank = [f for r in analysis.ranks for f in rank_findings(r)]
    job = [f for rule in JOB_RULES for f in rule(analysis, per_rank)]
    return Findings(ranked(fold(per_rank + job)))


def rank_findings(r: RankAnalysis) -> list[Finding]:
    """One rank's own findings: the rank rules' (unfolded), or those found where its trace was
    when it was read from a cluster summary."""
    if r.findings is not None:
        return [Finding.from_dict(f) for f in r.findings]
    return name_modules(r, cap_savings(r, [f for rule in RANK_RULES if (f := rule(r)) is not None]))


def fold(findings: list[Finding]) -> list[Finding]:
    """One finding per id: the costliest rank's, naming the other ranks and windows it was
    found on (a 64-rank job with the same bottleneck everywhere reads as one finding)."""
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
    out = []
    for group in by_id.values():
        best = max(group, key=lambda f: (f.saving_pct, -(f.rank or 0), -f.window))
        if len(group) > 1:
            others = sorted((f for f in group if f is not best),
                            key=lambda f: (f.rank or 0, f.window))
            best.evidence.append(Evidence("also found on", ", ".join(
                _label(f) for f in others), "", "saving there"))
            best.extra["ranks"] = sorted({f.rank for f in group if f.rank is not None})
        out.append(best)
    return out


def _label(f: Finding) -> str:
    window = f" window {f.window}" if f.window else ""
    return f"rank {f.rank}{window} ({f.saving_pct:.0f}%)"
