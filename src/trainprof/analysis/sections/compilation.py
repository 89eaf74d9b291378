"""Time inside the steps spent compiling (torch.compile), and step time no recorded event covers.

``compile``: the union of the compiler's host ranges (trace/compile_names.py) inside each step.
Each separate compile range (a run of nested or touching ranges) is a first compilation or a
recompilation: the ``Torch-Compiled Region: F/N`` marker that follows a forward compile (or,
for a backward compile, the one that came before it) says which (``N`` = 0 first, above 0
recompilation). Without markers, the ranges in the first step that compiles are first
compilations and later ones recompilations.

``untraced``: step time that no recorded op (CPU op, annotation, CUDA API call) on any thread
and no device work covers, in gaps of at least ``UNTRACED_MIN_GAP_US`` (shorter ones are the
Python between ops that host_bound measures): Python or native code the profiler does not see (JIT compilers
outside torch, file or network I/O, sleeps, waits). See docs/metrics.md, "Compilation and
untraced time".
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.exposure import window_sets
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.windows import Window, WindowedSection, owns
from trainprof.analysis.tabular import share
from trainprof.structs import Record
from trainprof.trace.compile_names import BACKWARD_COMPILE_NAMES, compiled_region, is_compile
from trainprof.trace.model import DEVICE_KINDS, LAUNCH_KINDS, Kind, Trace

#: Untraced gaps shorter than this are Python between ops (host overhead, host_bound's), not
#: time the profiler does not see; only longer gaps count as untraced.
UNTRACED_MIN_GAP_US = 1000.0
#: A Python frame (with_stack=True) names untraced time when at least this share of it lies
#: inside that time; the frames named, by time.
FRAME_INSIDE_SHARE = 0.8
FRAMES = 3
FRAME_MIN_SHARE = 0.1  # of the longest one's time
#: Host events that count as "recorded" for the untraced time.
_RECORDED_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.SYNC, *LAUNCH_KINDS)


class UntracedFrame(Record):
    """A Python frame (with_stack=True) inside the untraced time, in ms per step."""

    name: str
    ms_per_step: float


class Compilation(Record):
    """Compile and untraced time of one rank, per step and in total."""

    steps: int
    compile_ms: float  # mean per step
    compile_pct: float | None  # share of all step time
    first_ms: float  # mean per step, first compilations
    recompile_ms: float  # mean per step, recompilations
    first_compilations: int  # compile ranges (forward graphs) that were first compilations
    recompilations: int
    steps_compiling: list[int]  # step numbers with any compile time
    compile_per_step_ms: list[tuple[int, float]]
    untraced_ms: float  # mean per step
    untraced_pct: float | None
    untraced_per_step_ms: list[tuple[int, float]]
    longest_untraced: tuple[int, float] | None  # (step, ms) of the longest untraced gap
    markers: bool = False  # whether Torch-Compiled Region markers told first from recompile
    names: list[str] = field(default_factory=list)  # the compile phases seen, by time
    #: Python frames (with_stack=True) inside the untraced time
    untraced_frames: list[UntracedFrame] = field(default_factory=list)

    def to_pandas(self) -> Any:
        """One row per step: ``step``, ``compile_ms``, ``untraced_ms``."""
        untraced = dict(self.untraced_per_step_ms)
        compiling = dict(self.compile_per_step_ms)
        steps = sorted(set(untraced) | set(compiling))
        return data_frame([{"step": s, "compile_ms": compiling.get(s, 0.0),
                            "untraced_ms": untraced.get(s, 0.0)} for s in steps])


class CompileRange(msgspec.Struct):
    """A compile range as one window sees it: its start (the key), whether the window owns it,
    how much of the window's own steps it covers, and what decides whether it recompiles."""

    start: float
    owned: bool
    covered_us: float
    backward: bool
    marker: bool | None  # the region marker's verdict, None when the window holds none
    step_start: float  # start of the step it begins in, -inf before the first step


class CompilationPart(msgspec.Struct):
    """What one window tells of compile and untraced time in its own steps."""

    ranges: list[CompileRange]
    markers: bool  # region markers in the window
    compile_per_step: list[float]  # µs per own step
    gaps: iv.Intervals  # own steps' time no recorded event covers: long gaps and both ends
    frames: dict[int, float]  # name index -> µs inside the window's interior long gaps
    #: Per gap at the window's edges, (start, end): name index -> µs of the frames inside it,
    #: counted if the joined gap is long enough.
    edge_frames: dict[tuple[float, float], dict[int, float]]
    open_frames: list[tuple[int, float, float, float]]  # (name, ts, end, dur): over a gap's end
    phase_names: set[str]
    names: list[str]  # the trace's name table (shared, not a copy)


def compilation_part(window: Window) -> CompilationPart:
    """Compile ranges and untraced gaps of the window's own steps."""
    trace, steps = window.trace, window.steps
    ev = trace.events
    slots = iv.union(steps.starts, steps.ends)
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
    name_compiles = np.array([is_compile(s) for s in ev.names], dtype=bool)
    compiling = host & name_compiles[ev.name] if len(ev) else host
    ranges = iv.union(ev.ts[compiling], event_ends(ev)[compiling])
    marker, markers = _marker_verdicts(trace, ranges)
    backward = _backward(trace, ranges)
    covered = iv.covered_in_windows(slots, ranges.starts, ranges.ends)
    owned = owns(window, ranges.starts)
    step_of = np.searchsorted(steps.starts, ranges.starts, side="right") - 1
    step_start = np.where(step_of >= 0, steps.starts[np.maximum(step_of, 0)], -np.inf) \
        if len(steps) else np.full(len(ranges), -np.inf)
    kept = [CompileRange(float(ranges.starts[i]), bool(owned[i]), float(covered[i]),
                         bool(backward[i]), marker[i], float(step_start[i]))
            for i in np.flatnonzero(owned | (covered > 0))]
    gaps = iv.subtract(slots, _recorded(trace, steps))
    return CompilationPart(
        ranges=kept, markers=markers,
        compile_per_step=[float(u) for u in iv.covered_in_windows(ranges, steps.starts,
                                                                  steps.ends)],
        gaps=_long_gaps(gaps, keep_ends=True),
        **_frame_parts(window, gaps),
        phase_names=set(_phase_names(trace, compiling & owns(window, ev.ts), limit=None)),
        names=ev.names,
    )


def combine_compilation(parts: list[CompilationPart], steps: StepWindows) -> Compilation:
    """Compile and untraced time of every window's steps."""
    n = max(len(steps), 1)
    total = float(steps.durations.sum()) if len(steps) else 0.0
    owned = sorted((r for p in parts for r in p.ranges if r.owned), key=lambda r: r.start)
    markers = bool(owned) and any(p.markers for p in parts)
    recompile = _recompiled(owned, markers, bool(len(steps)))
    flag = {r.start: again for r, again in zip(owned, recompile, strict=True)}
    covered = [(r.covered_us, flag.get(r.start, False)) for p in parts for r in p.ranges]
    compile_us = sum(u for u, _ in covered)
    forward = np.array([not r.backward for r in owned], dtype=bool)
    counted = forward if forward.any() else np.ones(len(owned), dtype=bool)
    again = np.array(recompile, dtype=bool)
    per_step = [u for p in parts for u in p.compile_per_step]
    untraced = _long_gaps(_joined([p.gaps for p in parts]))
    untraced_per_step = iv.covered_in_windows(untraced, steps.starts, steps.ends)
    names = parts[0].names if parts else []
    return Compilation(
        steps=len(steps),
        compile_ms=compile_us / n / 1000.0,
        compile_pct=share(compile_us, total),
        first_ms=sum(u for u, a in covered if not a) / n / 1000.0,
        recompile_ms=sum(u for u, a in covered if a) / n / 1000.0,
        first_compilations=int((counted & ~again).sum()),
        recompilations=int((counted & again).sum()),
        steps_compiling=[int(s) for s, us in zip(steps.numbers, per_step, strict=True) if us > 0],
        compile_per_step_ms=[(int(s), float(us) / 1000.0)
                             for s, us in zip(steps.numbers, per_step, strict=True)],
        untraced_ms=untraced.total() / n / 1000.0,
        untraced_pct=share(untraced.total(), total),
        untraced_per_step_ms=[(int(s), float(us) / 1000.0)
                              for s, us in zip(steps.numbers, untraced_per_step, strict=True)],
        longest_untraced=_longest(untraced, steps),
        markers=markers,
        names=sorted(set().union(*(p.phase_names for p in parts)))[:20],
        untraced_frames=_combine_frames(parts, untraced, steps, names, n),
    )


#: Compile time (first and recompilations) and untraced time inside the steps. Each window
#: measures its own steps; compile ranges are told first or recompiled once all are known, and
#: untraced gaps touching a window's edge are joined with the next window's before the
#: minimum gap applies.
compilation = WindowedSection(partial=compilation_part, combine=combine_compilation,
                              cost=0.25)


def _recompiled(owned: list[CompileRange], markers: bool, has_steps: bool) -> list[bool]:
    """Which compile ranges (by start) are recompilations."""
    if markers:
        return [bool(r.marker) for r in owned]
    if not has_steps:
        return [k > 0 for k in range(len(owned))]
    first = min((r.step_start for r in owned), default=0.0)
    return [r.step_start > first for r in owned]


def _joined(parts: list[iv.Intervals]) -> iv.Intervals:
    """Gaps of consecutive windows, those that touch at a window's edge made one."""
    starts = np.concatenate([p.starts for p in parts]) if parts else np.empty(0)
    ends = np.concatenate([p.ends for p in parts]) if parts else np.empty(0)
    return iv.union(starts, ends)


def _frame_parts(window: Window, gaps: iv.Intervals) -> dict[str, Any]:
    """The Python frames the window owns inside its steps. Those in its interior long gaps are
    summed by name; those inside a gap at its edges (which the next or last window may
    lengthen) are summed by gap and name; the few reaching over an edge gap's end or past the
    window are kept whole, to be measured against the joined gaps."""
    trace, steps = window.trace, window.steps
    ev = trace.events
    out: dict[str, Any] = {"frames": {}, "edge_frames": {}, "open_frames": []}
    if not len(gaps) or not len(steps):
        return out
    step_of = np.searchsorted(steps.starts, ev.ts, side="right") - 1
    in_step = (step_of >= 0) & (ev.ts < steps.ends[np.maximum(step_of, 0)])
    idx = np.flatnonzero((ev.kind == Kind.PYTHON) & (ev.dur > 0) & in_step & owns(window, ev.ts))
    ts, end = ev.ts[idx], event_ends(ev)[idx]
    crossing = end > window.region[1]
    for k in sorted({0, len(gaps) - 1}):  # the edge gaps
        g0, g1 = float(gaps.starts[k]), float(gaps.ends[k])
        within = ~crossing & (ts >= g0) & (end <= g1)
        crossing |= ~within & (end > g0) & (ts < g1)
        names, which = np.unique(ev.name[idx[within]], return_inverse=True)
        totals = np.bincount(which, weights=ev.dur[idx[within]], minlength=len(names))
        out["edge_frames"][(g0, g1)] = dict(zip(names.tolist(), totals.tolist(), strict=True))
        idx, ts, end, crossing = idx[~within], ts[~within], end[~within], crossing[~within]
    out["open_frames"] = [(int(ev.name[i]), float(ev.ts[i]), float(event_ends(ev)[i]), float(ev.dur[i]))
                          for i in idx[crossing]]
    interior = _long_gaps(iv.Intervals(gaps.starts[1:-1], gaps.ends[1:-1]))
    idx = idx[~crossing]
    inside = iv.covered_in_windows(interior, ev.ts[idx], event_ends(ev)[idx])
    keep = inside >= FRAME_INSIDE_SHARE * ev.dur[idx]
    names, which = np.unique(ev.name[idx[keep]], return_inverse=True)
    totals = np.bincount(which, weights=inside[keep], minlength=len(names))
    out["frames"] = dict(zip(names.tolist(), totals.tolist(), strict=True))
    return out


def _combine_frames(parts: list[CompilationPart], gaps: iv.Intervals, steps: StepWindows,
                    names: list[str], n: int) -> list[UntracedFrame]:
    """The Python frames lying mostly inside the untraced time, by time inside (ms per step)."""
    if not len(gaps) or not len(steps):
        return []
    totals: dict[int, float] = {}
    for p in parts:
        for k, u in p.frames.items():
            totals[k] = totals.get(k, 0.0) + u
        for (g0, g1), inside in p.edge_frames.items():  # wholly inside: counted if it is long
            i = int(np.searchsorted(gaps.starts, g0, side="right")) - 1
            if i >= 0 and gaps.ends[i] >= g1:
                for k, u in inside.items():
                    totals[k] = totals.get(k, 0.0) + u
    frames = [f for p in parts for f in p.open_frames]
    if frames:
        name, ts, end, dur = (np.array(c) for c in zip(*frames, strict=True))
        covered = iv.covered_in_windows(gaps, ts, end)
        kept = covered >= FRAME_INSIDE_SHARE * dur
        for k, u in zip(name[kept].tolist(), covered[kept].tolist(), strict=True):
            totals[k] = totals.get(k, 0.0) + u
    if not totals:
        return []
    top = max(totals.values())
    order = [k for k in sorted(totals, key=lambda k: (-totals[k], k))[:FRAMES]
             if totals[k] >= FRAME_MIN_SHARE * top]  # not the frames in passing
    return [UntracedFrame(names[k], totals[k] / n / 1000.0) for k in order]


def _recorded(trace: Trace, steps: StepWindows) -> iv.Intervals:
    """Time covered by a recorded host op on any thread, or by device work."""
    ev = trace.events
    mask = ev.of_kind(*_RECORDED_KINDS)
    host = iv.union(ev.ts[mask], event_ends(ev)[mask])
    if trace.has_gpu and len(steps):
        return iv.join(host, window_sets(trace, steps).busy)
    dev = ev.of_kind(*DEVICE_KINDS)
    return iv.join(host, iv.union(ev.ts[dev], event_ends(ev)[dev]))


def _long_gaps(gaps: iv.Intervals, keep_ends: bool = False) -> iv.Intervals:
    """The gaps of at least UNTRACED_MIN_GAP_US (and, with ``keep_ends``, the first and last
    ones, which the windows beside may lengthen)."""
    keep = gaps.ends - gaps.starts >= UNTRACED_MIN_GAP_US
    if keep_ends and len(keep):
        keep[[0, -1]] = True
    return iv.Intervals(gaps.starts[keep], gaps.ends[keep])


def _backward(trace: Trace, ranges: iv.Intervals) -> np.ndarray:
    """Which compile ranges compile a backward graph (hold a backward compile phase)."""
    ev = trace.events
    out = np.zeros(len(ranges), dtype=bool)
    if not len(ranges):
        return out
    back = np.array([s in BACKWARD_COMPILE_NAMES for s in ev.names], dtype=bool)[ev.name]
    pos = np.searchsorted(ranges.starts, ev.ts[back], side="right") - 1
    out[pos[pos >= 0]] = True
    return out


def _marker_verdicts(trace: Trace, ranges: iv.Intervals) -> tuple[list[bool | None], bool]:
    """Per compile range, whether its region marker says recompilation (None when no marker
    is found), and whether the trace holds region markers. The marker that follows a forward
    compile, or the one before a backward compile, says which."""
    ev = trace.events
    counter = np.array([(r[1] if (r := compiled_region(s)) else -1) for s in ev.names])
    marks = np.flatnonzero(counter[ev.name] >= 0) if len(ev) else np.zeros(0, dtype=int)
    out: list[bool | None] = [None] * len(ranges)
    if not len(marks) or not len(ranges):
        return out, bool(len(marks))
    ts, count = ev.ts[marks], counter[ev.name[marks]]
    after = np.searchsorted(ts, ranges.ends, side="left")  # the next marker
    before = np.searchsorted(ts, ranges.starts, side="right") - 1  # the last one
    pick = np.where(_backward(trace, ranges), before, after)
    for i in np.flatnonzero((pick >= 0) & (pick < len(ts))):
        out[i] = bool(count[pick[i]] > 0)
    return out, True


def _longest(untraced: iv.Intervals, steps: StepWindows) -> tuple[int, float] | None:
    if not len(untraced) or not len(steps):
        return None
    k = int(np.argmax(untraced.ends - untraced.starts))
    i = max(int(np.searchsorted(steps.starts, untraced.starts[k], side="right")) - 1, 0)
    return int(steps.numbers[i]), float(untraced.ends[k] - untraced.starts[k]) / 1000.0


def _phase_names(trace: Trace, compiling: np.ndarray, limit: int | None = 20) -> list[str]:
    """The compile phases seen, outermost spellings first, each once."""
    ev = trace.events
    seen: dict[str, None] = {}
    for i in np.unique(ev.name[compiling]):
        seen.setdefault(ev.names[i], None)
    return sorted(seen)[:limit]
