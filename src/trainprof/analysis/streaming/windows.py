"""Analysis window by window: how a section runs over a trace too large to hold at once.

A long trace is analysed in windows of consecutive steps. Each ``Window`` holds the events that
start from the beginning of the step before its first step to the end of the step after its last
one (the margin: work launched in one step that runs in the next, allocations and collectives
still open), and the step windows it answers for. The first window reaches back to the start of
the trace, the last one to its end, so every event is seen by some window.

A section that can stream is a ``WindowedSection``: ``partial`` reads one window and returns
what the section needs to remember of it (figures for the window's own steps, totals, open
state); ``combine`` turns the parts of every window, in order, into the section's result. Called
like a plain section, ``section(trace, steps)``, it analyses the whole trace as one window, so
the in-memory and the streamed results come from the same code and are equal by construction
when ``partial`` answers only for the window's own steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec
import numpy as np

from trainprof.analysis.overview.steps import StepWindows
from trainprof.trace.model import Trace
from trainprof.trace.window import time_slice

P = TypeVar("P")
R = TypeVar("R")

#: Steps of margin on each side of a window's own steps.
MARGIN_STEPS = 1


class Window(msgspec.Struct, frozen=True):
    """One window of a trace: its events (with the margin) and the steps it answers for."""

    trace: Trace
    steps: StepWindows
    index: int = 0
    count: int = 1
    #: The time this window answers for, for figures that are not per step: from its first
    #: step's start to the next window's first step's start (-inf for the first window, +inf
    #: for the last), so that the windows' regions partition the time line.
    region: tuple[float, float] = (-math.inf, math.inf)
    #: The span of every step of the trace (first start, last end); None: ``steps.span``.
    all_span: tuple[float, float] | None = None
    #: The same as recorded, before re-timing; None: ``steps.recorded_span``.
    all_recorded_span: tuple[float, float] | None = None

    @property
    def span(self) -> tuple[float, float]:
        """The span of every step of the trace (not only this window's)."""
        return self.steps.span if self.all_span is None else self.all_span

    @property
    def recorded_span(self) -> tuple[float, float]:
        """``span`` of the steps as recorded (``StepWindows.recorded_span``)."""
        return self.steps.recorded_span if self.all_recorded_span is None \
            else self.all_recorded_span

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


#: ``WindowedSection.cost`` of a section that does not say.
DEFAULT_COST = 0.1


class WindowedSection(Generic[P, R], msgspec.Struct, frozen=True):
    """A section computed window by window (see the module docstring). ``cost``: the seconds
    it took on the 1.1 GB trace (benchmarks/make_big_trace.py), serially; the section workers
    take the costliest first (analysis/parallel/section_workers.py)."""

    partial: Callable[[Window], P]
    combine: Callable[[list[P], StepWindows], R]
    cost: float = DEFAULT_COST

    def __call__(self, trace: Trace, steps: StepWindows) -> R:
        """The in-memory path: the whole trace as one window."""
        return self.combine([self.partial(Window(trace, steps))], steps)

    def over(self, windows: list[Window], steps: StepWindows) -> R:
        """The streamed path: ``windows`` in order; ``steps`` are every window's steps."""
        return self.combine([self.partial(w) for w in windows], steps)


def step_range(steps: StepWindows, first: int, stop: int) -> StepWindows:
    """Steps ``first`` to ``stop - 1`` of ``steps`` (the notes stay with the whole)."""
    rec_starts, rec_ends = steps.recorded_starts, steps.recorded_ends
    return StepWindows(numbers=steps.numbers[first:stop], starts=steps.starts[first:stop],
                       ends=steps.ends[first:stop], source=steps.source, notes=[],
                       recorded_starts=None if rec_starts is None else rec_starts[first:stop],
                       recorded_ends=None if rec_ends is None else rec_ends[first:stop])


def window_bounds(steps: StepWindows, first: int, stop: int,
                  margin: int = MARGIN_STEPS) -> tuple[float, float]:
    """The time span of the window holding steps ``first`` to ``stop - 1``, margin included."""
    n = len(steps)
    start = -math.inf if first - margin <= 0 else float(steps.starts[first - margin])
    end = math.inf if stop + margin >= n else float(steps.starts[stop + margin])
    return start, end


def windows_of(trace: Trace, steps: StepWindows, per_window: int,
               margin: int = MARGIN_STEPS) -> list[Window]:
    """A loaded trace cut into windows of ``per_window`` steps (tests and small traces; a trace
    too large for memory is cut while it is read)."""
    if per_window < 1:
        raise ValueError("per_window must be at least 1")
    firsts = list(range(0, max(len(steps), 1), per_window))
    out = []
    for i, first in enumerate(firsts):
        stop = min(first + per_window, len(steps))
        start, end = window_bounds(steps, first, stop, margin)
        out.append(Window(trace=time_slice(trace, start, end),
                          steps=step_range(steps, first, stop), index=i, count=len(firsts),
                          region=region_of(steps, first, stop), all_span=steps.span,
                          all_recorded_span=steps.recorded_span))
    return out


def region_of(steps: StepWindows, first: int, stop: int) -> tuple[float, float]:
    """The region (``Window.region``) of the window holding steps ``first`` to ``stop - 1``."""
    start = -math.inf if first <= 0 else float(steps.starts[first])
    end = math.inf if stop >= len(steps) else float(steps.starts[stop])
    return start, end


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
