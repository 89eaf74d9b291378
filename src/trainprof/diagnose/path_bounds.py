"""Critical-path bounds on the findings' savings.

Removing some work from a step cannot shorten it by more than that work's time on the step's
critical path (the old path, less that work, is still a path). The critical path section
(analysis/critical_path) gives that time per category, and for the items it replayed the step
time at zero, a tighter bound. A finding whose estimate is larger is capped to the bound, and
says so in its evidence. Only findings whose work is one of the path's categories or items are
capped (``BOUNDS``); the others keep their own estimate.
"""

from __future__ import annotations

from typing import Any

from trainprof.analysis.results import RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding
from trainprof.diagnose.rules.common import ms_of

#: finding id -> (what-if item (kind, name) or None, the path categories its work is in).
BOUNDS: dict[str, tuple[tuple[str, str] | None, tuple[str, ...]]] = {
    "data_loading": (("data_loader", "DataLoader"), ("data_loading",)),
    "host_to_device_copies": (None, ("copies", "sync_wait", "launch_overhead")),
}


def path_bound_pct(path: Any, finding_id: str) -> float | None:
    """The most a finding's fix can save, in % of the step, by the critical path; None when
    the path says nothing about its work."""
    if finding_id not in BOUNDS or path is None or not getattr(path, "steps", None):
        return None
    item, categories = BOUNDS[finding_id]
    bound = sum(path.split_pct.get(c, 0.0) for c in categories)
    if item is not None:
        replayed = path.saving_cap_pct(*item)
        if replayed is not None:
            bound = min(bound, replayed)
    return bound


def cap_savings(r: RankAnalysis, findings: list[Finding]) -> list[Finding]:
    """The rank's findings, each saving no larger than its critical-path bound."""
    path = r.sections.critical_path
    for f in findings:
        bound = path_bound_pct(path, f.id)
        if bound is None or f.saving_pct <= bound:
            continue
        f.evidence.append(Evidence("saving capped by the critical path (was "
                                   f"{f.saving_pct:.1f}%)", round(bound, 1), "% of step",
                                   "what-if replay of the step graph"))
        f.saving_pct = bound
        f.saving_ms = ms_of(r, bound)
        f.extra["saving_capped_by"] = "critical_path"
    return findings
