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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.exposure import window_sets
from trainprof.analysis.frames import data_frame
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.tabular import share
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


@dataclass
class Compilation:
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
    #: Python frames (with_stack=True) inside the untraced time: (name, ms per step)
    untraced_frames: list[tuple[str, float]] = field(default_factory=list)

    def to_pandas(self) -> Any:
        """One row per step: ``step``, ``compile_ms``, ``untraced_ms``."""
        untraced = dict(self.untraced_per_step_ms)
        compiling = dict(self.compile_per_step_ms)
        steps = sorted(set(untraced) | set(compiling))
        return data_frame([{"step": s, "compile_ms": compiling.get(s, 0.0),
                            "untraced_ms": untraced.get(s, 0.0)} for s in steps])

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "compile_ms": self.compile_ms,
            "compile_pct": self.compile_pct,
            "first_ms": self.first_ms,
            "recompile_ms": self.recompile_ms,
            "first_compilations": self.first_compilations,
            "recompilations": self.recompilations,
            "steps_compiling": self.steps_compiling,
            "compile_per_step_ms": [[s, ms] for s, ms in self.compile_per_step_ms],
            "untraced_ms": self.untraced_ms,
            "untraced_pct": self.untraced_pct,
            "untraced_per_step_ms": [[s, ms] for s, ms in self.untraced_per_step_ms],
            "longest_untraced": list(self.longest_untraced) if self.longest_untraced else None,
            "markers": self.markers,
            "names": self.names,
            "untraced_frames": [{"name": s, "ms_per_step": ms} for s, ms in self.untraced_frames],
        }


def compilation(trace: Trace, steps: StepWindows) -> Compilation:
    """Compile time (first and recompilations) and untraced time inside the steps."""
    ev = trace.events
    n = max(len(steps), 1)
    total = float(steps.durations.sum()) if len(steps) else 0.0
    slots = iv.union(steps.starts, steps.ends)
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
    name_compiles = np.array([is_compile(s) for s in ev.names], dtype=bool)
    compiling = host & name_compiles[ev.name] if len(ev) else host
    ranges = iv.union(ev.ts[compiling], ev.end[compiling])
    recompile, markers = _recompiles(trace, ranges, steps)
    first = iv.Intervals(ranges.starts[~recompile], ranges.ends[~recompile])
    again = iv.Intervals(ranges.starts[recompile], ranges.ends[recompile])
    in_steps = iv.intersect(ranges, slots)
    per_step = iv.covered_in_windows(ranges, steps.starts, steps.ends)
    untraced = _long_gaps(iv.subtract(slots, _recorded(trace, steps)))
    untraced_per_step = iv.covered_in_windows(untraced, steps.starts, steps.ends)
    forward = ~_backward(trace, ranges)
    counted = forward if forward.any() else np.ones(len(ranges), dtype=bool)
    return Compilation(
        steps=len(steps),
        compile_ms=in_steps.total() / n / 1000.0,
        compile_pct=share(in_steps.total(), total),
        first_ms=iv.intersect(first, slots).total() / n / 1000.0,
        recompile_ms=iv.intersect(again, slots).total() / n / 1000.0,
        first_compilations=int((counted & ~recompile).sum()),
        recompilations=int((counted & recompile).sum()),
        steps_compiling=[int(s) for s, us in zip(steps.numbers, per_step, strict=True) if us > 0],
        compile_per_step_ms=[(int(s), float(us) / 1000.0)
                             for s, us in zip(steps.numbers, per_step, strict=True)],
        untraced_ms=untraced.total() / n / 1000.0,
        untraced_pct=share(untraced.total(), total),
        untraced_per_step_ms=[(int(s), float(us) / 1000.0)
                              for s, us in zip(steps.numbers, untraced_per_step, strict=True)],
        longest_untraced=_longest(untraced, steps),
        markers=markers,
        names=_phase_names(trace, compiling),
        untraced_frames=_frames_in(trace, untraced, steps, n),
    )


def _recorded(trace: Trace, steps: StepWindows) -> iv.Intervals:
    """Time covered by a recorded host op on any thread, or by device work."""
    ev = trace.events
    mask = ev.of_kind(*_RECORDED_KINDS)
    host = iv.union(ev.ts[mask], ev.end[mask])
    if trace.has_gpu and len(steps):
        return iv.join(host, window_sets(trace, steps).busy)
    dev = ev.of_kind(*DEVICE_KINDS)
    return iv.join(host, iv.union(ev.ts[dev], ev.end[dev]))


def _frames_in(trace: Trace, gaps: iv.Intervals, steps: StepWindows,
               n: int) -> list[tuple[str, float]]:
    """The Python frames lying mostly inside ``gaps``, by time inside them (ms per step).
    Only frames that begin inside the steps: the ones already open when tracing began (the
    training loop's callers) are cut to the trace and would seem to lie inside a gap."""
    ev = trace.events
    if not len(gaps) or not len(steps):
        return []
    step_of = np.searchsorted(steps.starts, ev.ts, side="right") - 1
    in_step = (step_of >= 0) & (ev.ts < steps.ends[np.maximum(step_of, 0)])
    idx = np.flatnonzero((ev.kind == Kind.PYTHON) & (ev.dur > 0) & in_step)
    if not len(idx):
        return []
    inside = iv.covered_in_windows(gaps, ev.ts[idx], ev.end[idx])
    keep = inside >= FRAME_INSIDE_SHARE * ev.dur[idx]
    idx, inside = idx[keep], inside[keep]
    names, which = np.unique(ev.name[idx], return_inverse=True)
    totals = np.bincount(which, weights=inside)
    order = [k for k in np.argsort(-totals, kind="stable")[:FRAMES]
             if totals[k] >= FRAME_MIN_SHARE * totals.max()]  # not the frames in passing
    return [(ev.names[names[k]], float(totals[k]) / n / 1000.0) for k in order]


def _long_gaps(gaps: iv.Intervals) -> iv.Intervals:
    keep = gaps.ends - gaps.starts >= UNTRACED_MIN_GAP_US
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


def _recompiles(trace: Trace, ranges: iv.Intervals,
                steps: StepWindows) -> tuple[np.ndarray, bool]:
    """Which compile ranges are recompilations, and whether region markers told."""
    ev = trace.events
    if not len(ranges):
        return np.zeros(0, dtype=bool), False
    counter = np.array([(r[1] if (r := compiled_region(s)) else -1) for s in ev.names])
    marks = np.flatnonzero(counter[ev.name] >= 0) if len(ev) else np.zeros(0, dtype=int)
    if len(marks):
        ts, count = ev.ts[marks], counter[ev.name[marks]]
        backward = _backward(trace, ranges)
        after = np.searchsorted(ts, ranges.ends, side="left")  # the next marker
        before = np.searchsorted(ts, ranges.starts, side="right") - 1  # the last one
        pick = np.where(backward, before, after)
        found = (pick >= 0) & (pick < len(ts))
        out = np.zeros(len(ranges), dtype=bool)
        out[found] = count[pick[found]] > 0
        return out, True
    if not len(steps):
        return np.arange(len(ranges)) > 0, False
    step_of = np.searchsorted(steps.starts, ranges.starts, side="right") - 1
    return step_of > step_of.min(), False


def _longest(untraced: iv.Intervals, steps: StepWindows) -> tuple[int, float] | None:
    if not len(untraced) or not len(steps):
        return None
    k = int(np.argmax(untraced.ends - untraced.starts))
    i = max(int(np.searchsorted(steps.starts, untraced.starts[k], side="right")) - 1, 0)
    return int(steps.numbers[i]), float(untraced.ends[k] - untraced.starts[k]) / 1000.0


def _phase_names(trace: Trace, compiling: np.ndarray) -> list[str]:
    """The compile phases seen, outermost spellings first, each once."""
    ev = trace.events
    seen: dict[str, None] = {}
    for i in np.unique(ev.name[compiling]):
        seen.setdefault(ev.names[i], None)
    return sorted(seen)[:20]
