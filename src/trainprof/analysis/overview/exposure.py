"""Device activity of the step window, shared by the copy and communication sections, and the
exposed part of an interval set: the time no covering activity hides."""

from __future__ import annotations

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.overview.timeline import DeviceSets, device_sets
from trainprof.trace.model import Trace

# Kept on the trace object, so it lives and dies with the trace; keyed by the window.
_ATTRIBUTE = "_trainprof_window_sets"


def window_sets(trace: Trace, steps: StepWindows) -> DeviceSets:
    """``timeline.device_sets`` over the step window, computed once per trace and window."""
    return span_sets(trace, *steps.span)


def span_sets(trace: Trace, start: float, end: float) -> DeviceSets:
    """``timeline.device_sets`` over ``[start, end)``, computed once per trace and span."""
    store = trace.__dict__.setdefault(_ATTRIBUTE, {})
    key = (start, end)
    if key not in store:
        store[key] = device_sets(trace, start, end)
    return store[key]


def cover(*sets: iv.Intervals) -> iv.Intervals:
    """The union of disjoint interval sets (one sort, no pairwise merging)."""
    return iv.union(np.concatenate([s.starts for s in sets]),
                    np.concatenate([s.ends for s in sets]))


def exposed(busy: iv.Intervals, hidden_by: iv.Intervals) -> float:
    """Length of ``busy`` (disjoint) outside ``hidden_by`` (disjoint), in its units."""
    if not len(busy):
        return 0.0
    hidden = iv.covered_in_windows(hidden_by, busy.starts, busy.ends)
    return busy.total() - float(hidden.sum())
