"""Expert parallelism: each rank's all-to-all time (the token dispatch and combine, DeepEP's
``dispatch``/``combine``/``notify_dispatch`` kernels included) and the part no compute runs
beside; across the job, how far the ranks' all-to-all times spread (docs/parallelism.md).

A rank whose experts receive fewer tokens finishes its compute first and waits in the next
all-to-all for the overloaded rank: the spread of the all-to-all time across ranks is what the
imbalance costs. ``expert_balance`` (the job's ``experts`` section) gives:

* per rank: all-to-all ms per step, exposed ms per step, hidden share;
* the imbalance cost = the slowest rank's all-to-all time (the one that waits most) minus the
  ranks' mean, ms per step and in % of the step; the overloaded rank is the one that waits
  least (the others wait for it).

On a GPU rank the all-to-all is its communication kernels of that type; hidden is the part a
compute kernel on another stream runs beside (DualPipe overlaps one micro-batch's dispatch and
combine with another's compute). On a CPU rank (gloo) it is the host's all-to-all ranges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.parallelism import activity
from trainprof.analysis.parallelism.signals import is_c10d_call
from trainprof.analysis.parallelism.sums import ExpertSums
from trainprof.analysis.streaming.parts import Part
from trainprof.structs import Derived, Record
from trainprof.trace.model import Trace

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis

#: The all-to-all hidden under compute at or above this share (%) is said to be overlapped (as
#: DualPipe does); the note in the job's section says so.
OVERLAPPED_PCT = 50.0


def expert_part(trace: Trace, part: Part, all_to_all: np.ndarray) -> ExpertSums:
    """The rank's all-to-all over the part (``all_to_all``: its all-to-all events, kernels on
    a GPU rank, host ranges on a CPU rank)."""
    start, end = part.start, part.end
    busy = activity.busy(trace, all_to_all, start, end)
    exposed = iv.subtract(busy, activity.compute(trace, start, end))
    ev = trace.events
    owned = all_to_all[part.owns(ev.ts[all_to_all], ev.ts[all_to_all] + ev.dur[all_to_all])]
    calls = [i for i in owned.tolist() if is_c10d_call(ev.names[ev.name[i]])]
    return ExpertSums(all_to_all_us=busy.total(), exposed_us=exposed.total(),
                      calls=len(calls) if calls else len(owned))


class ExpertRank(Record):
    """One rank's all-to-all, ms per step."""

    rank: int
    all_to_all_ms: float = field(name="all_to_all_ms_per_step")
    exposed_ms: float = field(name="exposed_ms_per_step")
    hidden_pct: float
    step_ms: float


class ExpertBalance(Record):
    """The job's all-to-all across its expert-parallel ranks."""

    json_derived = (Derived("mean_all_to_all_ms", "ranks", "mean_ms"),
                    Derived("slowest_rank", "mean_all_to_all_ms"),
                    Derived("overloaded_rank", "slowest_rank"),
                    Derived("imbalance_ms_per_step", "overloaded_rank", "imbalance_ms"),
                    Derived("imbalance_pct", "imbalance_ms_per_step"),
                    Derived("hidden_pct", "imbalance_pct"))

    ranks: list[ExpertRank]
    notes: list[str] = field(default_factory=list)

    @property
    def mean_ms(self) -> float:
        return float(np.mean([r.all_to_all_ms for r in self.ranks])) if self.ranks else 0.0

    @property
    def slowest(self) -> ExpertRank | None:
        """The rank with the most all-to-all time (it waits most for the others)."""
        return max(self.ranks, key=lambda r: r.all_to_all_ms) if len(self.ranks) > 1 else None

    @property
    def overloaded(self) -> ExpertRank | None:
        """The rank with the least all-to-all time: the others wait for it."""
        return min(self.ranks, key=lambda r: r.all_to_all_ms) if len(self.ranks) > 1 else None

    @property
    def slowest_rank(self) -> int | None:
        slow = self.slowest
        return slow.rank if slow else None

    @property
    def overloaded_rank(self) -> int | None:
        heavy = self.overloaded
        return heavy.rank if heavy else None

    @property
    def imbalance_ms(self) -> float:
        """The slowest rank's all-to-all time minus the mean, ms per step."""
        slow = self.slowest
        return slow.all_to_all_ms - self.mean_ms if slow is not None else 0.0

    @property
    def step_ms(self) -> float:
        return float(np.median([r.step_ms for r in self.ranks])) if self.ranks else 0.0

    @property
    def imbalance_pct(self) -> float:
        """``imbalance_ms`` in % of the (median) step."""
        return 100.0 * self.imbalance_ms / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def hidden_pct(self) -> float:
        """The share of the ranks' all-to-all time that compute runs beside, in %."""
        total = sum(r.all_to_all_ms for r in self.ranks)
        exposed = sum(r.exposed_ms for r in self.ranks)
        return 100.0 * (1.0 - exposed / total) if total > 0 else 0.0

    def to_pandas(self) -> Any:
        """One row per rank."""
        return data_frame([r.to_dict() for r in self.ranks])


def expert_balance(ranks: list[RankAnalysis]) -> ExpertBalance | None:
    """The ``experts`` job section: every rank whose parallelism section measured all-to-all."""
    rows = []
    for r in ranks:
        p = r.sections.parallelism
        e = p.expert if p is not None else None
        if p is None or e is None or "expert" not in p.kinds:
            continue
        rows.append(ExpertRank(rank=r.rank, all_to_all_ms=e.all_to_all_ms,
                               exposed_ms=e.exposed_ms, hidden_pct=e.hidden_pct,
                               step_ms=float(r.steps.mean_ms)))
    if not rows:
        return None
    out = ExpertBalance(ranks=sorted(rows, key=lambda x: x.rank))
    if len(rows) < 2:
        out.notes.append("One expert-parallel rank loaded: the spread across ranks needs every "
                         "rank's trace.")
    if out.hidden_pct >= OVERLAPPED_PCT:
        out.notes.append(f"{out.hidden_pct:.0f}% of the all-to-all runs beside compute on "
                         "other streams: dispatch and combine are overlapped (as DualPipe "
                         "does).")
    return out
