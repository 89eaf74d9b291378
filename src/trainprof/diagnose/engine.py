"""Run every rule over an analysis and rank the findings, most costly first."""

from __future__ import annotations

from trainprof.analysis.overview import Analysis
from trainprof.diagnose.findings import Finding, ranked
from trainprof.diagnose.rules import JOB_RULES, RANK_RULES


def diagnose(analysis: Analysis) -> list[Finding]:
    """The findings for every rank and the job, sorted by estimated saving."""
    findings: list[Finding] = []
    for r in analysis.ranks:
        for rule in RANK_RULES:
            found = rule(r)
            if found is not None:
                findings.append(found)
    for job_rule in JOB_RULES:
        findings.extend(job_rule(analysis))
    return ranked(findings)
