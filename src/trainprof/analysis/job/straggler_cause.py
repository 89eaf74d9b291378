"""Why a straggler is late: the part of its step that the other ranks do not have.

The step breakdown claims communication before data loading and host work, so the time a rank
spends waiting inside collectives counts as communication, never as data loading, compute or
host time. Whatever the straggler has more of than the other ranks' median, in ms per step,
is what makes it late:

* **data loading**: the breakdown's DataLoader time (waiting for the next batch while nothing
  else runs);
* **compute**: on a GPU rank, kernels, memcpy and memset; on a CPU-only rank, CPU Exec (the
  PyTorch ops themselves);
* **host**: on a GPU rank, CPU Exec, runtime (launch calls) and Other while the GPU idles; on
  a CPU-only rank, Other (time no op covers: Python, sleeps, I/O).

The largest excess is named when it explains at least ``CAUSE_MIN_SHARE`` of the wait the
straggler causes; otherwise the trace does not say. docs/communication.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainprof.structs import Record

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis

#: The straggler's excess in one part explains at least this share of the wait it causes.
CAUSE_MIN_SHARE = 0.5
#: reason -> (breakdown categories on a GPU rank, on a CPU-only rank)
CAUSE_PARTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "data loading": (("dataloader",), ("dataloader",)),
    "compute": (("kernel", "memcpy", "memset"), ("cpu_exec",)),
    "host": (("cpu_exec", "runtime", "other"), ("other",)),
}


class Cause(Record):
    """What the straggler has more of: its ms per step against the other ranks' median."""

    reason: str  # a key of CAUSE_PARTS
    categories: list[str]
    rank_ms: float
    others_ms: float
    excess_ms: float

    @property
    def label(self) -> str:
        return f"its {self.reason}"

    def evidence(self) -> str:
        return (f"the cause is {self.label} ({' + '.join(self.categories)}): "
                f"{self.rank_ms:.1f} ms per step against {self.others_ms:.1f} ms on the other "
                "ranks (median)")


def straggler_cause(straggler: int, by_rank: dict[int, list[RankAnalysis]],
                    caused_ms: float) -> Cause | None:
    """The part of the step the straggler has most more of, when it explains its lateness."""
    on_gpu = any(r.timeline is not None for r in by_rank[straggler])
    best: Cause | None = None
    for reason, (gpu_parts, cpu_parts) in CAUSE_PARTS.items():
        parts = gpu_parts if on_gpu else cpu_parts
        per_rank = {k: _ms_per_step(rs, parts) for k, rs in by_rank.items()}
        others = float(np.median([v for k, v in per_rank.items() if k != straggler]))
        cause = Cause(reason, list(parts), per_rank[straggler], others,
                      per_rank[straggler] - others)
        if best is None or cause.excess_ms > best.excess_ms:
            best = cause
    if best is None or best.excess_ms < CAUSE_MIN_SHARE * caused_ms or best.excess_ms <= 0:
        return None
    return best


def _ms_per_step(windows: list[RankAnalysis], parts: tuple[str, ...]) -> float:
    """The mean ms per step of these breakdown categories over a rank's windows."""
    steps = [max(int(r.steps.count), 0) for r in windows]
    total = sum(sum(r.breakdown_ms.get(p, 0.0) for p in parts) * n
                for r, n in zip(windows, steps, strict=True))
    return total / sum(steps) if sum(steps) else 0.0
