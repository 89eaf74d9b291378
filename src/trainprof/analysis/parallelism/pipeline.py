"""The ``pipeline`` job section: each pipeline stage's compute and waiting, the schedule's
bubble, and how unbalanced the stages are (docs/parallelism.md).

The stages are the ranks whose ``parallelism`` section shows a pipeline, in stage order: the
stage a multi-stage schedule names (``PP:1F0``), else first (receives nothing in forward),
middle, last (sends nothing in forward), then by rank. A GPipe or 1F1B step of M micro-batches
over S stages lasts about (M + S - 1) times the slowest stage's time per micro-batch, so:

* the schedule's ideal bubble is (S - 1) / (M + S - 1) of the step;
* balancing the stages (each doing the mean stage's compute) saves
  (M + S - 1) / M x (heaviest stage's compute - the mean stage's compute) per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.structs import Derived, Record

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis

_ROLE_ORDER = {"first": 0, "middle": 1, None: 1, "last": 2}


class Stage(Record):
    """One stage (rank) of the pipeline: medians over its steps, in ms."""

    json_derived = (Derived("idle_pct", "cooldown_wait_ms"),)

    stage: int
    rank: int
    compute_ms: float  # its compute per step
    step_ms: float
    waiting_ms: float  # mean per step of send/recv with no compute running
    #: waiting_ms by phase: warm-up, steady state, cool-down (result.StageStep)
    warmup_wait_ms: float = 0.0
    steady_wait_ms: float = 0.0
    cooldown_wait_ms: float = 0.0

    @property
    def phases_ms(self) -> tuple[float, float, float]:
        """The waiting by phase: warm-up, steady state, cool-down."""
        return self.warmup_wait_ms, self.steady_wait_ms, self.cooldown_wait_ms

    @property
    def idle_pct(self) -> float:
        """The share of its step it does not compute (its bubble, waiting included)."""
        return max(1.0 - self.compute_ms / self.step_ms, 0.0) * 100.0 if self.step_ms else 0.0


class Pipeline(Record):
    """The pipeline of a job, from its stages' ranks."""

    json_derived = (Derived("step_ms", "schedule"), Derived("ideal_bubble_pct", "step_ms"),
                    Derived("heaviest_stage", "ideal_bubble_pct"),
                    Derived("imbalance_pct", "heaviest_stage"),
                    Derived("imbalance_saving_ms", "imbalance_pct"))

    stages: list[Stage]
    micro_batches: int | None
    schedule: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def step_ms(self) -> float:
        """The median of the stages' step times."""
        return float(np.median([s.step_ms for s in self.stages])) if self.stages else 0.0

    @property
    def ideal_bubble_pct(self) -> float | None:
        """(S - 1) / (M + S - 1): the share of a GPipe/1F1B step no schedule of these stages
        and micro-batches can fill."""
        n, m = len(self.stages), self.micro_batches
        if n < 2 or not m:
            return None
        return (n - 1) / (m + n - 1) * 100.0

    @property
    def heaviest(self) -> Stage | None:
        return max(self.stages, key=lambda s: s.compute_ms) if len(self.stages) > 1 else None

    @property
    def heaviest_stage(self) -> int | None:
        heavy = self.heaviest
        return heavy.stage if heavy else None

    @property
    def mean_compute_ms(self) -> float:
        return float(np.mean([s.compute_ms for s in self.stages])) if self.stages else 0.0

    @property
    def imbalance_pct(self) -> float:
        """How much more the heaviest stage computes than the mean stage, in %."""
        heavy, mean = self.heaviest, self.mean_compute_ms
        return (heavy.compute_ms / mean - 1.0) * 100.0 if heavy and mean > 0 else 0.0

    @property
    def imbalance_saving_ms(self) -> float:
        """Per step: (M + S - 1) / M x (heaviest stage's compute - the mean stage's)."""
        heavy = self.heaviest
        if heavy is None:
            return 0.0
        m, n = self.micro_batches or 1, len(self.stages)
        return (m + n - 1) / m * (heavy.compute_ms - self.mean_compute_ms)

    def to_pandas(self) -> Any:
        """One row per stage."""
        return data_frame([s.to_dict() for s in self.stages])


def pipeline_stages(ranks: list[RankAnalysis]) -> Pipeline | None:
    """The pipeline of the job, or None when no rank shows one."""
    found = [(r, p) for r in ranks if (x := r.sections.parallelism) is not None
             and "pipeline" in x.kinds and (p := x.pipeline) is not None]
    if not found:
        return None
    named = all(p.stage is not None for _, p in found)
    found.sort(key=lambda rp: (rp[1].stage, rp[0].rank) if named else
               (_ROLE_ORDER.get(rp[1].role, 1), rp[0].rank))
    stages = [Stage(stage=p.stage if named and p.stage is not None else i, rank=r.rank,
                    compute_ms=p.median_ms("compute_ms"), step_ms=p.median_ms("step_ms"),
                    waiting_ms=p.mean_ms("p2p_exposed_ms"),
                    warmup_wait_ms=p.mean_ms("warmup_wait_ms"),
                    steady_wait_ms=p.mean_ms("steady_wait_ms"),
                    cooldown_wait_ms=p.mean_ms("cooldown_wait_ms"))
              for i, (r, p) in enumerate(found)]
    micro = [p.micro_batches for _, p in found if p.micro_batches]
    schedules = {p.schedule for _, p in found if p.schedule}
    notes = []
    if len(stages) < 2:
        notes.append("One pipeline stage loaded: the bubble and the balance need every stage's "
                     "trace.")
    return Pipeline(stages=stages, micro_batches=int(np.median(micro)) if micro else None,
                    schedule=schedules.pop() if len(schedules) == 1 else None, notes=notes)
