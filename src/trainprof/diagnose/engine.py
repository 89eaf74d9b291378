"""Run every rule over an analysis, fold repeats across ranks, rank by estimated saving."""

from __future__ import annotations

from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import SLOWEST_RANK, Evidence, Finding, Findings
from trainprof.diagnose.modules import name_modules
from trainprof.diagnose.path_bounds import cap_savings
from trainprof.diagnose.registry import JOB_RULES, RANK_RULES
from trainprof.diagnose.savings import settle

#: How the evidence says that a saving is not on the job's slowest rank.
NOT_SLOWEST = ", not on the slowest rank"


def diagnose(analysis: Analysis) -> list[Finding]:
    """The findings for every rank and the job, one per id, sorted by estimated saving; those
    that measure the same time share one saving (diagnose/savings.py)."""
    per_rank = [f for r in analysis.ranks for f in rank_findings(r)]
    job = _capped([f for rule in JOB_RULES for f in rule(analysis, per_rank)], analysis.ranks)
    table = analysis.job.rank_table
    slowest = table.slowest if table is not None else None
    return Findings(settle(fold(per_rank + job, slowest)))


def rank_findings(r: RankAnalysis) -> list[Finding]:
    """One rank's own findings: the rank rules' (unfolded), or those found where its trace was
    when it was read from a cluster summary."""
    if r.findings is not None:
        return [Finding.from_dict(f) for f in r.findings]
    return name_modules(r, cap_savings(r, [f for rule in RANK_RULES if (f := rule(r)) is not None]))


def _capped(findings: list[Finding], ranks: list[RankAnalysis]) -> list[Finding]:
    """Job rules' findings about one rank, capped by that rank's critical path as the rank
    rules' are (communication_exposed is a job rule)."""
    by_rank = {(r.rank, r.window): r for r in ranks}
    for f in findings:
        r = by_rank.get((f.rank, f.window)) if f.rank is not None else None
        if r is not None:
            cap_savings(r, [f])
    return findings


def fold(findings: list[Finding], slowest: int | None = None) -> list[Finding]:
    """One finding per id: the costliest rank's, naming the other ranks and windows it was
    found on (a 64-rank job with the same bottleneck everywhere reads as one finding), and
    the job's ``slowest`` rank when the saving is on another one."""
    by_id: dict[str, list[Finding]] = {}
    for f in findings:
        by_id.setdefault(f.id, []).append(f)
        f.extra.pop(SLOWEST_RANK, None)  # what an earlier fold said, if any
        f.evidence = [e for e in f.evidence if not e.what.endswith(NOT_SLOWEST)]
    out = []
    for group in by_id.values():
        best = max(group, key=lambda f: (f.saving_pct, -(f.rank or 0), -f.window))
        if len(group) > 1:
            others = sorted((f for f in group if f is not best),
                            key=lambda f: (f.rank or 0, f.window))
            best.evidence.append(Evidence("also found on", ", ".join(
                _label(f) for f in others), "", "saving there"))
            best.extra["ranks"] = sorted({f.rank for f in group if f.rank is not None})
        if slowest is not None and best.rank is not None and best.rank != slowest:
            _not_slowest(best, slowest, [f for f in group if f.rank == slowest])
        out.append(best)
    return out


def _not_slowest(f: Finding, slowest: int, there: list[Finding]) -> None:
    """Say that the saving is on a rank that is not the slowest, and what it is there."""
    saving = (f"it saves {max(x.saving_pct for x in there):.0f}% there" if there
              else "not found there")
    f.evidence.append(Evidence(f"saving measured on rank {f.rank}{NOT_SLOWEST}",
                               slowest, "", f"the job runs at rank {slowest}'s pace; {saving}"))
    f.extra[SLOWEST_RANK] = slowest


def _label(f: Finding) -> str:
    window = f" window {f.window}" if f.window else ""
    return f"rank {f.rank}{window} ({f.saving_pct:.0f}%)"
