"""Training phases per step: data, forward, backward, optimizer, other.

Measured on the host timeline, so a CPU-only run is judged on them too. Claimed in this order:
data (the DataLoader's ``__next__``), optimizer (``Optimizer.step``/``zero_grad`` annotations),
backward (from the first to the last backward-pass op of the step), forward (from the end of
the data wait to the start of backward; without a backward pass, to the last host op of the
step); other is the rest of the step (e.g. waiting for the GPU to finish).
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.trace.model import (
    FLAG_BACKWARD,
    FLAG_DATALOADER,
    FLAG_OPTIMIZER,
    Kind,
    Trace,
)
from trainprof.vocabulary import PHASES  # noqa: F401 (re-exported)


def _per_step_span(steps: StepWindows, ts: np.ndarray, te: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """First start and last end, per step, of events that start inside the step."""
    n = len(steps)
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    which = np.searchsorted(steps.starts, ts, side="right") - 1
    ok = which >= 0
    ok[ok] &= ts[ok] < steps.ends[which[ok]]
    which, ts, te = which[ok], ts[ok], np.minimum(te[ok], steps.ends[which[ok]])
    if len(which) and np.all(which[1:] >= which[:-1]):
        # Events sorted by start fall in their steps in order: each step's events are one run.
        heads = np.flatnonzero(np.r_[True, which[1:] != which[:-1]])
        first[which[heads]] = np.minimum.reduceat(ts, heads)
        last[which[heads]] = np.maximum.reduceat(te, heads)
        return first, last
    np.minimum.at(first, which, ts)
    np.maximum.at(last, which, te)
    return first, last


def step_phases(trace: Trace, steps: StepWindows) -> dict[str, np.ndarray]:
    """Microseconds per phase and step (arrays of len(steps)); they add up to the step times."""
    if not len(steps):
        return {p: np.zeros(0) for p in PHASES}
    parts = phase_intervals(trace, steps)
    return {p: iv.covered_in_windows(parts[p], steps.starts, steps.ends) for p in PHASES}


_CACHE = "_trainprof_phase_intervals"


def phase_intervals(trace: Trace, steps: StepWindows) -> dict[str, iv.Intervals]:
    """The time of each phase inside the steps, as disjoint intervals (each phase claims only
    what the phases before it left; ``other`` is what none claimed). The last steps' result is
    kept on the trace: the phases and the host section both ask."""
    key = (steps.starts.tobytes(), steps.ends.tobytes())
    cached = trace.__dict__.get(_CACHE)
    if cached is not None and cached[0] == key:
        return cached[1]
    out = _phase_intervals(trace, steps)
    trace.__dict__[_CACHE] = (key, out)
    return out


def _phase_intervals(trace: Trace, steps: StepWindows) -> dict[str, iv.Intervals]:
    ev = trace.events
    if not len(steps):
        return {p: iv.Intervals.empty() for p in PHASES}
    data_mask = ev.flagged(FLAG_DATALOADER)
    data = iv.union(ev.ts[data_mask], event_ends(ev)[data_mask])
    opt_mask = ev.flagged(FLAG_OPTIMIZER)
    optimizer = iv.union(ev.ts[opt_mask], event_ends(ev)[opt_mask])

    bwd_mask = ev.flagged(FLAG_BACKWARD)
    bwd_first, bwd_last = _per_step_span(steps, ev.ts[bwd_mask], event_ends(ev)[bwd_mask])
    has_bwd = np.isfinite(bwd_first)
    backward = iv.union(bwd_first[has_bwd], bwd_last[has_bwd])

    host = ev.of_kind(Kind.CPU_OP, Kind.PYTHON, Kind.USER_ANNOTATION) & ~data_mask
    _, host_last = _per_step_span(steps, ev.ts[host], event_ends(ev)[host])
    # Forward runs from the end of this step's data wait (or the step start) to backward.
    data_end = _last_end_before(data, steps.starts, np.where(has_bwd, bwd_first, steps.ends))
    fwd_start = np.maximum(steps.starts, data_end)
    fwd_end = np.where(has_bwd, bwd_first, np.where(np.isfinite(host_last), host_last, fwd_start))
    forward = iv.union(fwd_start, np.maximum(fwd_end, fwd_start))

    slots = iv.union(steps.starts, steps.ends)
    out: dict[str, iv.Intervals] = {}
    for name, role in (
        ("data", data),
        ("optimizer", optimizer),
        ("backward", backward),
        ("forward", forward),
    ):
        out[name], slots = iv.split(slots, role)
    out["other"] = slots
    return out


def _last_end_before(s: iv.Intervals, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per window, the end of the last interval of ``s`` ending in (lo, hi], else lo."""
    if not len(s):
        return lo.copy()
    i = np.searchsorted(s.ends, hi, side="right") - 1
    found = (i >= 0) & (s.ends[np.maximum(i, 0)] > lo)
    return np.where(found, s.ends[np.maximum(i, 0)], lo)


def phase_percentages(per_step: dict[str, np.ndarray], step_us: np.ndarray) -> dict[str, float]:
    total = float(step_us.sum())
    if total <= 0:
        return {p: 0.0 for p in PHASES}
    return {p: float(per_step[p].sum()) / total * 100.0 for p in PHASES}


def _phases_part(window: Window) -> dict[str, np.ndarray]:
    return step_phases(window.trace, window.steps)


def _phases_whole(parts: list[dict[str, np.ndarray]], steps: StepWindows
                  ) -> dict[str, np.ndarray]:
    return {p: np.concatenate([x[p] for x in parts]) for p in PHASES}


#: ``step_phases`` window by window: each step's phases from the window that owns it.
STEP_PHASES: WindowedSection[dict[str, np.ndarray], dict[str, np.ndarray]] = WindowedSection(
    _phases_part, _phases_whole, cost=0.09)
