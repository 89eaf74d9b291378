"""The quick checklist's verdict: each phase's share of the step against its usual healthy range,
and, for a phase out of range, the diagnosis rule (docs/rules.md) that looks into it.
"""

from __future__ import annotations

from typing import Any, Literal

from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import DOCS
from trainprof.structs import Derived, Record
from trainprof.vocabulary import TIMED_PHASES

SCHEMA = "trainprof.checklist/1"
PHASES = TIMED_PHASES
#: The usual healthy share of a training step, in percent, per phase (low, high): a common rule
#: of thumb for forward and backward, not a law (backward costs about twice forward for most
#: layers: two matrix products per forward one). Data loading and the optimizer are judged by
#: their diagnosis rules' verdicts (diagnose/verdicts.py), so the checklist, the live view and a
#: recorded trace agree: their upper bound is the rule's threshold.
HEALTHY_PCT: dict[str, tuple[float, float]] = {
    "data": (0.0, verdicts.DATA_LOADING_PCT),
    "forward": (30.0, 40.0),
    "backward": (40.0, 50.0),
    "optimizer": (0.0, verdicts.OPTIMIZER_PCT),
}
#: The diagnosis rule that measures a phase above its range in a recorded trace.
RULE_WHEN_HIGH: dict[str, str] = {"data": "data_loading", "optimizer": "optimizer_overhead"}
Status = Literal["low", "ok", "high"]

_ADVICE: dict[tuple[str, Status], str] = {
    ("data", "high"): "the model waits for batches: more DataLoader workers, pin_memory=True, "
                      "a cheaper __getitem__ (decode or augment less, or ahead of time)",
    ("data", "low"): "the loader keeps up; nothing to recover here",
    ("forward", "high"): "forward takes more than its usual share: work without gradients "
                         "inside forward() (preprocessing, metrics, frozen layers) or Python "
                         "overhead per op; `trainprof analyze` on a recording shows the ops",
    ("forward", "low"): "another phase takes the time (see the phases above their range)",
    ("backward", "high"): "backward takes more than its usual share: activation checkpointing "
                          "(forward runs again), gradient hooks, or an all-reduce inside "
                          "backward (rule communication_exposed on a recording)",
    ("backward", "low"): "another phase takes the time (see the phases above their range)",
    ("optimizer", "high"): "the optimizer step is costly: foreach=True or fused=True "
                           "(`trainprof bench` measures both), fewer parameter tensors",
    ("optimizer", "low"): "a cheap optimizer step; nothing to recover here",
}


class PhaseCheck(Record):
    """One phase: its median time per step, its share, and the verdict."""

    json_derived = (Derived("healthy_pct", "pct"), Derived("status", "healthy_pct"),
                    Derived("flagged", "status"), Derived("rule", "flagged"),
                    Derived("docs", "rule"), Derived("advice", "docs"))

    phase: str
    ms: float
    pct: float

    @property
    def healthy_pct(self) -> tuple[float, float]:
        return HEALTHY_PCT[self.phase]

    @property
    def verdict(self) -> verdicts.Verdict | None:
        """The diagnosis rule's verdict on this phase (data and optimizer only)."""
        if self.phase == "data":
            return verdicts.data_loading(verdicts.DataWait(self.pct))
        if self.phase == "optimizer":
            return verdicts.optimizer_overhead(verdicts.OptimizerFacts(self.pct))
        return None

    @property
    def status(self) -> Status:
        if self.phase in RULE_WHEN_HIGH:
            return "high" if self.verdict is not None else "ok"
        low, high = self.healthy_pct
        return "low" if self.pct < low else "high" if self.pct > high else "ok"

    @property
    def flagged(self) -> bool:
        """Out of range in the direction that costs time: any phase above its range, and
        forward or backward below theirs (the step's time is going elsewhere)."""
        status = self.status
        return status == "high" or (status == "low" and self.phase in ("forward", "backward"))

    @property
    def rule(self) -> str | None:
        return RULE_WHEN_HIGH.get(self.phase) if self.status == "high" else None

    @property
    def docs(self) -> str | None:
        """The page of the rule, if any."""
        rule = self.rule
        return f"{DOCS}#{rule.replace('_', '-')}" if rule else None

    @property
    def advice(self) -> str | None:
        return _ADVICE.get((self.phase, self.status))


class Checklist(Record):
    """The four phases, timed one by one, and how they were timed. Its JSON opens with the
    schema and the device, then the step, each phase's ms and share, the healthy ranges and
    the phases flagged, before each phase's check."""

    json_derived = (Derived("schema", "", attr="schema"), Derived("step_ms", "device"),
                    Derived("phases_ms", "step_ms"), Derived("phases_pct", "phases_ms"),
                    Derived("healthy_pct", "phases_pct"),
                    Derived("flagged", "healthy_pct", attr="flagged_phases"),
                    Derived("phases", "flagged"))
    json_internal = frozenset({"phases"})

    phases: list[PhaseCheck]
    device: str
    method: dict[str, Any]

    @property
    def step_ms(self) -> float:
        return sum(p.ms for p in self.phases)

    def phase(self, name: str) -> PhaseCheck:
        return next(p for p in self.phases if p.phase == name)

    def flagged(self) -> list[PhaseCheck]:
        return [p for p in self.phases if p.flagged]

    @property
    def schema(self) -> str:
        return SCHEMA

    @property
    def phases_ms(self) -> dict[str, float]:
        return {p.phase: p.ms for p in self.phases}

    @property
    def phases_pct(self) -> dict[str, float]:
        return {p.phase: p.pct for p in self.phases}

    @property
    def healthy_pct(self) -> dict[str, list[float]]:
        return {name: list(bounds) for name, bounds in HEALTHY_PCT.items()}

    @property
    def flagged_phases(self) -> list[str]:
        return [p.phase for p in self.flagged()]


def judge(phase_ms: dict[str, float], device: str, method: dict[str, Any]) -> Checklist:
    """Shares of the four phases' sum, and the verdict on each."""
    total = sum(phase_ms[p] for p in PHASES)
    checks = [PhaseCheck(p, phase_ms[p], 100.0 * phase_ms[p] / total if total > 0 else 0.0)
              for p in PHASES]
    return Checklist(checks, device, method)
