"""The step-time breakdown of the old TensorBoard plugin, in its priority order.

Each category claims only step time that no category before it claimed, so the categories add
up to the step time: Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec, and
Other for the rest. "CPU Exec" is therefore host work while nothing above it was running.
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.trace.model import FLAG_COMM, FLAG_DATALOADER, HOST_KINDS, LAUNCH_KINDS, Kind, Trace
from trainprof.vocabulary import ALL_CATEGORIES, CATEGORIES  # noqa: F401 (re-exported)

#: Categories in claiming order; "other" is whatever no category claimed.


class Breakdown(msgspec.Struct):
    """Microseconds per category and step (``per_step[category][i]`` for step i), and the
    host ops each step ran (``host_ops``, a measure of its work: ``host_ops_per_step``)."""

    per_step: dict[str, np.ndarray]
    step_us: np.ndarray
    host_ops: np.ndarray | None = None

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
        role = iv.union(ev.ts[mask], event_ends(ev)[mask])
        claimed, slots = iv.split(slots, role)
        per_step[name] = iv.covered_in_windows(claimed, steps.starts, steps.ends)
    per_step["other"] = iv.covered_in_windows(slots, steps.starts, steps.ends)
    step_us = steps.durations if n else np.zeros(0)
    return Breakdown(per_step=per_step, step_us=step_us, host_ops=host_ops_per_step(trace, steps))


def host_ops_per_step(trace: Trace, steps: StepWindows) -> np.ndarray:
    """How many ops (``cpu_op`` events, every depth) start inside each step as recorded (the
    ProfilerStep range, before re-timing to the device): the same loop body runs the same
    number each step, so a slow step with more is doing more work, and one with the same
    number did the same work slower."""
    ev = trace.events
    ts = ev.ts[ev.kind == Kind.CPU_OP]  # events are sorted by start
    starts = steps.starts if steps.recorded_starts is None else steps.recorded_starts
    ends = steps.ends if steps.recorded_ends is None else steps.recorded_ends
    return (np.searchsorted(ts, ends, side="left")
            - np.searchsorted(ts, starts, side="left")).astype(np.int64)


def _breakdown_part(window: Window) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The claimed time per category of the window's own steps, and their host ops."""
    part = step_breakdown(window.trace, window.steps)
    return part.per_step, part.host_ops


def _breakdown_whole(parts: list[tuple[dict[str, np.ndarray], np.ndarray | None]],
                     steps: StepWindows) -> Breakdown:
    per_step = {c: np.concatenate([p[c] for p, _ in parts]) for c in parts[0][0]}
    ops = [o for _, o in parts if o is not None]
    return Breakdown(per_step=per_step, step_us=steps.durations if len(steps) else np.zeros(0),
                     host_ops=np.concatenate(ops) if len(ops) == len(parts) else None)


#: ``step_breakdown`` window by window (analysis/streaming/windows.py): each step is claimed from the
#: events of the window that owns it.
BREAKDOWN: WindowedSection[tuple[dict[str, np.ndarray], np.ndarray | None], Breakdown] = (
    WindowedSection(
        _breakdown_part, _breakdown_whole, cost=2.2))
