"""The step-time breakdown of the old TensorBoard plugin, in its priority order.

Each category claims only step time that no category before it claimed, so the categories add
up to the step time: Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec, and
Other for the rest. "CPU Exec" is therefore host work while nothing above it was running.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import FLAG_COMM, FLAG_DATALOADER, HOST_KINDS, LAUNCH_KINDS, Kind, Trace
from trainprof.vocabulary import ALL_CATEGORIES, CATEGORIES  # noqa: F401 (re-exported)

#: Categories in claiming order; "other" is whatever no category claimed.


@dataclass
class Breakdown:
    """Microseconds per category and step (``per_step[category][i]`` for step i)."""

    per_step: dict[str, np.ndarray]
    step_us: np.ndarray

    def percentages(self) -> dict[str, float]:
        """Each category's share of the total step time, adding up to 100."""
        total = float(self.step_us.sum())
        if total <= 0:
            return {c: 0.0 for c in ALL_CATEGORIES}
        return {c: float(self.per_step[c].sum()) / total * 100.0 for c in ALL_CATEGORIES}

    def mean_ms(self) -> dict[str, float]:
        n = max(len(self.step_us), 1)
        return {c: float(self.per_step[c].sum()) / n / 1000.0 for c in ALL_CATEGORIES}


def role_masks(trace: Trace) -> dict[str, np.ndarray]:
    """Which events each category is made of (before priority is applied)."""
    ev = trace.events
    comm = ev.flagged(FLAG_COMM)
    loader = ev.flagged(FLAG_DATALOADER)
    host = ev.of_kind(*HOST_KINDS)
    return {
        "kernel": (ev.kind == Kind.KERNEL) & ~comm,
        "memcpy": ev.kind == Kind.MEMCPY,
        "memset": ev.kind == Kind.MEMSET,
        "communication": comm & ev.of_kind(Kind.KERNEL, *HOST_KINDS),
        "runtime": ev.of_kind(*LAUNCH_KINDS),
        "dataloader": loader,
        "cpu_exec": host & ~comm & ~loader,
    }


def step_breakdown(trace: Trace, steps: StepWindows) -> Breakdown:
    """Claim each step's time category by category, in priority order."""
    ev = trace.events
    n = len(steps)
    slots = iv.union(steps.starts, steps.ends)
    per_step: dict[str, np.ndarray] = {}
    for name, mask in role_masks(trace).items():
        role = iv.union(ev.ts[mask], ev.end[mask])
        claimed = iv.intersect(slots, role)
        per_step[name] = iv.covered_in_windows(claimed, steps.starts, steps.ends)
        slots = iv.subtract(slots, claimed)
    per_step["other"] = iv.covered_in_windows(slots, steps.starts, steps.ends)
    step_us = steps.durations if n else np.zeros(0)
    return Breakdown(per_step=per_step, step_us=step_us)
