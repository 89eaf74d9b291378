"""The ``critical_path`` section window by window.

The critical path is global in two ways: a long trace analyses evenly spaced steps only, chosen
from every step's event count, and the graph's typical launch lag is a median over all the
chosen steps. So it runs in two passes over the windows. The first (``_survey``) reads each
window's own steps' event counts and its time span; the plan (``_plan``) picks the steps and the
time ranges their analysis needs (each chosen step with one step of margin each side, the first
reaching back to the trace's start and the last to its end, as windows do). The second pass
(``_part``) keeps the events of those ranges that the window owns, and ``_combine`` joins them
into one trace, holding about ``STEP_EVENTS`` events and their margins at most, and analyses
it. On a trace short enough to analyse every step the ranges are the whole trace: the joined
trace is the trace itself, and the result the in-memory one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import numpy as np

from trainprof import structs
from trainprof.analysis.critical_path import section
from trainprof.analysis.critical_path.points import starts_at_or_before
from trainprof.analysis.critical_path.result import CriticalPath
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window, WindowedSection, owns, window_bounds
from trainprof.trace.model import Events, Flows, MemoryEvents, Trace

EVERYTHING = ((-math.inf, math.inf),)


class Survey(msgspec.Struct):
    """The first pass over one window: its own steps' events and its owned events' span."""

    per_step: np.ndarray  # events from each own step's start to the next step's
    events: int
    first_ts: float
    last_end: float


class Plan(msgspec.Struct):
    """What the second pass keeps: the chosen steps and the time ranges their analysis needs."""

    steps: StepWindows
    notes: list[str]
    ranges: tuple[tuple[float, float], ...]  # sorted, disjoint
    broken: bool = False  # the trace's times span more than a day


def _survey(window: Window) -> Survey:
    ev = window.trace.events
    own = owns(window, ev.ts)
    steps = window.steps
    bound = float(steps.ends[-1]) if window.last and len(steps) else window.region[1]
    per_step = section.step_events(ev.ts, steps.starts, bound) if len(steps) else \
        np.zeros(0, dtype=np.int64)
    n = int(own.sum())
    return Survey(per_step, n, float(ev.ts[own].min()) if n else math.inf,
                  float((ev.ts[own] + ev.dur[own]).max()) if n else -math.inf)  # own ends only


def _plan(surveys: list[Survey], steps: StepWindows) -> Plan:
    events = sum(s.events for s in surveys)
    if events:
        first = min(s.first_ts for s in surveys)
        last = float(np.max([s.last_end for s in surveys]))  # a NaN end stays NaN
        if not section.span_ok(first, last):
            return Plan(steps, [], (), broken=True)
    per_step = np.concatenate([s.per_step for s in surveys]) if surveys else np.zeros(0)
    chosen, notes, keep = section.sampled(steps, per_step)
    if keep is None:
        return Plan(chosen, notes, EVERYTHING)
    spans = sorted(window_bounds(steps, int(k), int(k) + 1) for k in keep)
    ranges: list[tuple[float, float]] = []
    for start, end in spans:  # merge overlapping ranges
        if ranges and start <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
        else:
            ranges.append((start, end))
    return Plan(chosen, notes, tuple(ranges))


class PathPart(msgspec.Struct):
    """A window's part: the events the plan needs that it owns (None: none, broken clocks);
    with its survey when it was read without a plan (one pass: every owned event kept)."""

    trace: Trace | None
    survey: Survey | None = None


def _part(window: Window, plan: Plan | None = None) -> PathPart:
    """The window's owned events that the plan needs (the trace itself when it is all).
    Without a plan (the one-pass protocol), all its owned events and its survey."""
    if plan is None:
        return PathPart(_owned(window, EVERYTHING), _survey(window))
    return PathPart(None if plan.broken else _owned(window, plan.ranges))


def _owned(window: Window, ranges: tuple[tuple[float, float], ...]) -> Trace:
    trace = window.trace
    if ranges == EVERYTHING and window.region == EVERYTHING[0]:
        return trace
    return _subset(trace, owns(window, trace.events.ts) & _within(trace.events.ts, ranges))


def _subset(trace: Trace, keep: np.ndarray) -> Trace:
    """The events ``keep`` of a trace, copied (the window can go); no memory events or flows
    (the critical path reads neither)."""
    return Trace(path=trace.path, rank=trace.rank, window=trace.window, t0_us=trace.t0_us,
                 events=_rows(trace.events, Events, keep),
                 memory=_rows(trace.memory, MemoryEvents, np.zeros(len(trace.memory), bool)),
                 flows=_rows(trace.flows, Flows, np.zeros(len(trace.flows), bool)),
                 threads=trace.threads, metadata=trace.metadata, notes=list(trace.notes))


def _combine(parts: list[PathPart], steps: StepWindows, plan: Plan | None = None) -> CriticalPath:
    """The critical path from the parts (read under ``plan``, or with their surveys)."""
    if plan is None:
        plan = _plan([p.survey for p in parts if p.survey is not None], steps)
        if not plan.broken and plan.ranges != EVERYTHING:
            parts = [PathPart(_subset(p.trace, _within(p.trace.events.ts, plan.ranges)))
                     for p in parts if p.trace is not None]
    if plan.broken:
        return section.broken_clock()
    pieces = [p.trace for p in parts if p.trace is not None]
    trace = pieces[0] if len(pieces) == 1 else _joined(pieces)
    return section.critical_path_of(trace, plan.steps, list(plan.notes))


def _within(ts: np.ndarray, ranges: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Which times fall in one of the ranges (start included, end not)."""
    starts = np.array([start for start, _ in ranges], dtype=np.float64)
    ends = np.array([end for _, end in ranges], dtype=np.float64)
    if len(ranges) > 2 and bool((starts[1:] > ends[:-1]).all()) and not np.isnan(ts).any():
        # Sorted, disjoint ranges: only the last starting at or before a time can hold it
        # (counted in one pass over times sorted by start, as events are).
        return ts < np.r_[-np.inf, ends][starts_at_or_before(starts, ts)]
    out = np.zeros(len(ts), dtype=bool)
    for start, end in ranges:
        out |= (ts >= start) & (ts < end)
    return out


def _rows(columns: Any, cls: type, keep: np.ndarray) -> Any:
    """Some rows of a columns Struct, copied (the window can go); tables are shared."""
    values = {}
    for f in structs.fields(cls):
        value = getattr(columns, f.name)
        values[f.name] = value[keep] if isinstance(value, np.ndarray) else value
    return cls(**values)


def _joined(pieces: list[Trace]) -> Trace:
    """Pieces of one trace, in time order, as one trace (the tables are shared)."""
    head = pieces[0]

    def join(cls: type, attr: str) -> Any:
        values = {}
        for f in structs.fields(cls):
            parts = [getattr(getattr(p, attr), f.name) for p in pieces]
            values[f.name] = (np.concatenate(parts) if isinstance(parts[0], np.ndarray)
                              else parts[0])
        return cls(**values)

    return Trace(path=head.path, rank=head.rank, window=head.window, t0_us=head.t0_us,
                 events=join(Events, "events"), memory=join(MemoryEvents, "memory"),
                 flows=join(Flows, "flows"), threads=head.threads, metadata=head.metadata,
                 notes=list(head.notes))


class PlannedSection(WindowedSection[PathPart, CriticalPath], frozen=True):
    """A windowed section that needs a plan from every window before it keeps anything.

    ``over(windows, steps)`` reads the windows twice: ``survey`` each, ``plan`` from all the
    surveys, then each window's ``partial(window, plan)`` (a list, or any iterable that cuts
    the trace again; an iterator is read once, as below). A reader that can read any time
    range again (a spill) surveys the windows as it streams them and calls ``from_ranges``.
    Called in one pass, ``partial(window)`` then ``combine(parts, steps)`` as any windowed
    section, it gives the same result but keeps every owned event until ``combine`` plans."""

    survey: Callable[[Window], Survey] = _survey
    plan: Callable[[list[Survey], StepWindows], Plan] = _plan

    def __call__(self, trace: Trace, steps: StepWindows) -> CriticalPath:
        return self.over([Window(trace, steps)], steps)

    def over(self, windows: Iterable[Window], steps: StepWindows) -> CriticalPath:
        if iter(windows) is windows:  # read once only: one pass, every owned event kept
            return self.combine([self.partial(w) for w in windows], steps)
        plan = self.plan([self.survey(w) for w in windows], steps)
        # partial and combine take the plan too (_part, _combine), beyond the base protocol
        return self.combine([self.partial(w, plan) for w in windows],  # type: ignore[call-arg]
                            steps, plan)

    def from_ranges(self, surveys: list[Survey], steps: StepWindows,
                    read: Callable[[float, float], Trace]) -> CriticalPath:
        """The result from every window's survey and ``read(start, end)``, the events that
        start in ``[start, end)`` (µs), called once per range the plan needs."""
        plan = self.plan(surveys, steps)
        parts = [] if plan.broken else [PathPart(read(*r)) for r in plan.ranges]
        return self.combine(parts, steps, plan)  # type: ignore[call-arg]


#: The critical path of every step of a trace (docs/critical_path.md): called on a whole
#: trace, ``critical_path(trace, steps)``, or window by window, ``critical_path.over(...)``.
critical_path = PlannedSection(partial=_part, combine=_combine, cost=0.7)
