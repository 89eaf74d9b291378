"""What a window owns of a trace, for sections that stream (analysis/streaming/windows.py): the events
that start in its region, and its part of the span of every step."""

from __future__ import annotations

import numpy as np

from trainprof.analysis.streaming.windows import Window


def owns(window: Window, ts: np.ndarray) -> np.ndarray:
    """Which of these start times fall in the window's region (each event is in one)."""
    return (ts >= window.region[0]) & (ts < window.region[1])


def owned_step_span(window: Window) -> tuple[float, float]:
    """The part of the steps' whole span (first step's start to last step's end) in the
    window's region; (0, 0) without steps, like ``StepWindows.span``."""
    start, end = window.span
    if start == end:
        return start, end
    return max(start, window.region[0]), min(end, window.region[1])
