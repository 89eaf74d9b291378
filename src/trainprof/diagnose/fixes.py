"""The fix a rule gives, by finding id, for whoever decides a finding outside the rules' own
modules (the live view asks ``diagnose/verdicts.py`` and then this for the words)."""

from __future__ import annotations

from trainprof.diagnose.findings import Fix


def fix_for(finding_id: str) -> Fix:
    """The rule's own fix for a finding the verdicts decide (KeyError for another id)."""
    from trainprof.diagnose.rules.host import STEADY_STEPS
    from trainprof.diagnose.rules.input import WORKERS
    from trainprof.diagnose.rules.memory import SAVE_MEMORY, USE_HEADROOM
    from trainprof.diagnose.rules.training import MULTI_TENSOR

    return {"data_loading": WORKERS, "optimizer_overhead": MULTI_TENSOR,
            "step_variance": STEADY_STEPS, "memory_pressure": SAVE_MEMORY,
            "memory_headroom": USE_HEADROOM}[finding_id]
