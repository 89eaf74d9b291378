"""What the GPU waits for while it idles inside a step, and host time no recorded op explains.

Each step's GPU idle time (no kernel, copy or memset on any device of the rank) is split, each
part claiming only what the parts before it left, into:

1. ``data``: a DataLoader ``__next__`` runs (waiting for the next batch);
2. ``communication``: a host collective runs (``gloo:*``, ``nccl:*``, ``c10d::*``);
3. ``after_optimizer``: after the step's last optimizer annotation, with no host op, annotation
   or CUDA API call running: Python the profiler does not see (logging, metrics, checkpoints);
4. ``lead_in``: before the step's first device work, except CUDA API calls: the host prepares
   the input outside a DataLoader (decoding, tokenising, pipeline pre-processing);
5. ``host_bound``: the rest: the host issuing work too slowly (Python and dispatcher time
   between launches, API calls, refilling the queue after a sync).

The parts add up to the GPU idle time. On a CPU-only trace only ``after_optimizer`` is
computed (host time outside any op after the optimizer step, as a share of the whole step).
See docs/metrics.md, "Host time".
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.exposure import window_sets
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.sections.host_outside import (
    OutsidePart,
    OutsideTraining,
    combine_outside,
    outside_part,
)
from trainprof.analysis.streaming.windows import Window, WindowedSection, owns
from trainprof.analysis.tabular import share
from trainprof.lazy import LazyPattern
from trainprof.structs import Record
from trainprof.trace.model import (
    FLAG_COMM,
    FLAG_DATALOADER,
    FLAG_OPTIMIZER,
    HOST_KINDS,
    LAUNCH_KINDS,
    Kind,
    Trace,
    is_source_frame,
)

PARTS = ("data", "communication", "after_optimizer", "lead_in", "host_bound")
#: A host range names a gap when at least this share of it lies inside the gap (so the frames
#: around the whole loop, which the gap is a small part of, are not named).
SPOT_INSIDE_SHARE = 0.8
#: How many host ranges are named per part.
SPOTS = 3
_FUSED_OPTIMIZER = LazyPattern(r"_fused_(?:adam|adamw|sgd|adagrad)", re.IGNORECASE)
#: Host events that count as "a recorded op running" (Python frames do not: they are the
#: Python code the ops leave unexplained).
_OP_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, *LAUNCH_KINDS)


class HostSpot(Record):
    """A host range (Python frame or op) inside the time of one part."""

    name: str
    ms_per_step: float


class OptimizerFacts(Record):
    """What the optimizer step runs: its name, ops per step and implementation."""

    name: str | None  # e.g. "Adam", from ``Optimizer.step#Adam.step``
    ops_per_step: float  # CPU ops (all depths) inside optimizer annotations, per step
    mean_op_us: float | None  # their mean duration
    implementation: str  # "fused", "foreach" or "for-loop" (from the op names), "" when none


class StepMs(Record):
    """A time of one step, in ms."""

    step: int
    ms: float


class HostTime(Record):
    """Per part: mean ms per step and share of the step time; None where not measured."""

    gpu: bool
    steps: int
    ms: dict[str, float | None] = field(name="ms_per_step")
    pct: dict[str, float | None]
    has_optimizer: bool
    after_optimizer_per_step_ms: list[StepMs]
    spots: dict[str, list[HostSpot]] = field(default_factory=dict)
    optimizer: OptimizerFacts | None = None
    #: DataLoader iterator names seen (``_SingleProcessDataLoaderIter``: no worker processes).
    data_loaders: list[str] = field(default_factory=list)
    #: Host ops outside the training phases (analysis/sections/host_outside.py).
    outside_training: OutsideTraining | None = None

    def to_pandas(self) -> Any:
        """One row per part of the host's step: mean ms per step and share of the step."""
        return data_frame([{"part": k, "ms_per_step": v, "pct": self.pct.get(k)}
                           for k, v in self.ms.items()])


def _set(trace: Trace, mask: np.ndarray) -> iv.Intervals:
    ev = trace.events
    return iv.union(ev.ts[mask], event_ends(ev)[mask])


def _after_optimizer(trace: Trace, steps: StepWindows) -> iv.Intervals:
    """From the end of each step's last optimizer annotation to the step's end."""
    ev = trace.events
    opt = np.flatnonzero(ev.flagged(FLAG_OPTIMIZER) & ev.of_kind(*HOST_KINDS))
    if not len(opt) or not len(steps):
        return iv.Intervals.empty()
    which = np.searchsorted(steps.starts, ev.ts[opt], side="right") - 1
    ok = which >= 0
    ok[ok] &= ev.ts[opt[ok]] < steps.ends[which[ok]]
    last = np.full(len(steps), -np.inf)
    np.maximum.at(last, which[ok], event_ends(ev)[opt[ok]])
    has = np.isfinite(last)
    return iv.union(np.minimum(last[has], steps.ends[has]), steps.ends[has])


def _lead_in(busy: iv.Intervals, steps: StepWindows) -> iv.Intervals:
    """From each step's start to its first device work (the whole step when it has none)."""
    if not len(busy):
        return iv.union(steps.starts, steps.ends)
    i = np.searchsorted(busy.ends, steps.starts, side="right")
    first = np.where(i < len(busy), busy.starts[np.minimum(i, len(busy) - 1)], np.inf)
    first = np.clip(first, steps.starts, steps.ends)
    return iv.union(steps.starts, first)


class SpotPart(msgspec.Struct):
    """What one window tells of the host ranges inside one part's time: per name index, the
    time inside of the ranges it saw whole, and the ranges crossing its edges (keyed by thread,
    start, name and duration) with the time it saw inside them."""

    totals: dict[int, float]
    crossing: dict[tuple[int, float, int, float], float]


class HostSlice(msgspec.Struct):
    """One window's figures, computed as on a GPU or as on a CPU-only trace."""

    totals: dict[str, float]  # µs per part, over the window's own steps
    after_optimizer: list[float]  # µs per own step
    spots: dict[str, SpotPart]


class OptimizerPart(msgspec.Struct):
    """The optimizer's ops one window owns."""

    ops: int
    op_us: float
    fused: bool
    foreach: bool
    labels: list[int]  # name indices of the ``Optimizer.step#`` annotations


class HostPart(msgspec.Struct):
    """What one window tells of the host time of its own steps."""

    gpu: bool
    slices: dict[bool, HostSlice]  # by whether computed as on a GPU
    has_optimizer: bool
    optimizer: OptimizerPart | None
    data_loaders: set[str]
    names: list[str]  # the trace's name table (shared, not a copy)
    outside: OutsidePart | None = None


def host_part(window: Window) -> HostPart:
    """The window's own steps; a window without device work is computed both ways, since
    whether the trace ran on a GPU is known only from every window."""
    trace, steps = window.trace, window.steps
    ev = trace.events
    owned = owns(window, ev.ts)
    gpu = trace.has_gpu
    after_window = _after_optimizer(trace, steps)
    slices = {g: _host_slice(window, g, after_window) for g in ({True} if gpu else {True, False})}
    loaders = np.unique(ev.name[ev.flagged(FLAG_DATALOADER) & owned])
    return HostPart(gpu=gpu, slices=slices, has_optimizer=bool(len(after_window)),
                    optimizer=_optimizer_part(window), data_loaders={ev.names[i] for i in loaders},
                    names=ev.names, outside=outside_part(window))


def combine_host(parts: list[HostPart], steps: StepWindows) -> HostTime:
    """The host time of every window's steps."""
    n = max(len(steps), 1)
    total = float(steps.durations.sum()) if len(steps) else 0.0
    gpu = any(p.gpu for p in parts)
    slices = [p.slices[gpu] for p in parts]
    sums = {k: sum(sl.totals[k] for sl in slices) for k in (slices[0].totals if slices else {})}
    ms = {p: (sums[p] / n / 1000.0 if p in sums else None) for p in PARTS}
    pct = {p: (share(sums[p], total) if p in sums else None) for p in PARTS}
    per_step = [u for sl in slices for u in sl.after_optimizer]
    names = parts[0].names if parts else []
    return HostTime(
        steps=len(steps),
        gpu=gpu,
        ms=ms,
        pct=pct,
        after_optimizer_per_step_ms=[StepMs(int(s), float(u) / 1000.0)
                                     for s, u in zip(steps.numbers, per_step, strict=True)],
        has_optimizer=any(p.has_optimizer for p in parts),
        spots={k: _combine_spots([sl.spots[k] for sl in slices], names, n)
               for k in ("after_optimizer", "lead_in") if k in sums},
        optimizer=_combine_optimizer([p.optimizer for p in parts if p.optimizer], steps, names),
        data_loaders=sorted(set().union(*(p.data_loaders for p in parts))),
        outside_training=combine_outside([p.outside for p in parts if p.outside], names),
    )


#: The split of GPU idle time (GPU runs) and host time outside ops after the optimizer. Every
#: part lies inside the steps: each window computes its own steps, from the events around them.
host_time = WindowedSection(partial=host_part, combine=combine_host, cost=1.3)


def _host_slice(window: Window, gpu: bool, after_window: iv.Intervals) -> HostSlice:
    """The parts of the GPU idle time (or, CPU-only, the time after the optimizer) inside the
    window's own steps."""
    trace, steps = window.trace, window.steps
    ev = trace.events
    slots = iv.union(steps.starts, steps.ends)
    busy = window_sets(trace, steps).busy if gpu else iv.Intervals.empty()
    idle = iv.subtract(slots, busy)
    ops = _set(trace, ev.of_kind(*_OP_KINDS))
    parts: dict[str, iv.Intervals] = {}
    rest = idle
    if gpu:
        for name, mask in (("data", ev.flagged(FLAG_DATALOADER)),
                           ("communication", ev.flagged(FLAG_COMM) & ev.of_kind(*HOST_KINDS))):
            parts[name], rest = iv.split(rest, _set(trace, mask))
    parts["after_optimizer"] = iv.subtract(iv.intersect(rest, after_window), ops)
    rest = iv.subtract(rest, parts["after_optimizer"])
    if gpu:
        api = _set(trace, ev.of_kind(*LAUNCH_KINDS))
        parts["lead_in"] = iv.subtract(iv.intersect(rest, _lead_in(busy, steps)), api)
        parts["host_bound"] = iv.subtract(rest, parts["lead_in"])
    return HostSlice(
        totals={p: parts[p].total() for p in PARTS if p in parts},
        after_optimizer=[float(u) for u in iv.covered_in_windows(parts["after_optimizer"],
                                                                steps.starts, steps.ends)],
        spots={p: _spot_part(window, parts[p]) for p in ("after_optimizer", "lead_in")
               if p in parts},
    )


def _optimizer_part(window: Window) -> OptimizerPart | None:
    """The optimizer's ops owned by the window, inside its steps' optimizer annotations."""
    trace, steps = window.trace, window.steps
    ev = trace.events
    opt = ev.flagged(FLAG_OPTIMIZER) & ev.of_kind(*HOST_KINDS)
    if not (opt & owns(window, ev.ts)).any():
        return None
    inside = iv.intersect(_set(trace, opt), iv.union(steps.starts, steps.ends))
    ops = np.flatnonzero(ev.of_kind(Kind.CPU_OP) & ~opt & owns(window, ev.ts))
    if len(inside):
        pos = np.searchsorted(inside.starts, ev.ts[ops], side="right") - 1
        ok = pos >= 0
        ok[ok] &= ev.ts[ops[ok]] < inside.ends[pos[ok]]
        ops = ops[ok]
    else:
        ops = ops[:0]
    names = [ev.names[i] for i in np.unique(ev.name[ops])]
    labels = [int(i) for i in np.unique(ev.name[opt & owns(window, ev.ts)])
              if ev.names[i].startswith("Optimizer.step#")]
    return OptimizerPart(ops=len(ops), op_us=float(ev.dur[ops].sum()),
                         fused=any(_FUSED_OPTIMIZER.search(x) for x in names),
                         foreach=any("_foreach_" in x for x in names), labels=labels)


def _combine_optimizer(parts: list[OptimizerPart], steps: StepWindows,
                       names: list[str]) -> OptimizerFacts | None:
    if not parts:
        return None
    ops = sum(p.ops for p in parts)
    impl = ("fused" if any(p.fused for p in parts)
            else "foreach" if any(p.foreach for p in parts)
            else "for-loop" if ops else "")
    labels = [i for p in parts for i in p.labels]
    label = names[min(labels)] if labels else None
    return OptimizerFacts(
        name=label.split("#", 1)[1].split(".")[0] if label else None,
        ops_per_step=ops / max(len(steps), 1),
        mean_op_us=sum(p.op_us for p in parts) / ops if ops else None,
        implementation=impl,
    )


def optimizer_facts(trace: Trace, steps: StepWindows) -> OptimizerFacts | None:
    """The optimizer's ops inside the steps, or None without optimizer annotations."""
    part = _optimizer_part(Window(trace, steps))
    return _combine_optimizer([part] if part else [], steps, trace.events.names)


def _spot_part(window: Window, gaps: iv.Intervals) -> SpotPart:
    """The host ranges (user Python frames, ops) inside ``gaps`` (the window's share of one
    part's time): whole for the ranges the window owns that end inside its span, as crossing
    items for those that reach over its edges."""
    out = SpotPart({}, {})
    if not len(gaps):
        return out
    trace = window.trace
    ev = trace.events
    source = np.array([is_source_frame(s) for s in ev.names], dtype=bool)
    candidates = (ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
                  | ((ev.kind == Kind.PYTHON) & source[ev.name]))
    idx = np.flatnonzero(candidates & (ev.dur > 0) & (event_ends(ev) > gaps.starts[0])
                         & (ev.ts < gaps.ends[-1]))
    inside = iv.covered_in_windows(gaps, ev.ts[idx], event_ends(ev)[idx])
    whole = owns(window, ev.ts[idx]) & (event_ends(ev)[idx] <= window.region[1])
    keep = whole & (inside >= SPOT_INSIDE_SHARE * ev.dur[idx])
    names, which = np.unique(ev.name[idx[keep]], return_inverse=True)
    totals = np.bincount(which, weights=inside[keep], minlength=len(names))
    out.totals.update(zip(names.tolist(), totals.tolist(), strict=True))
    for i, u in zip(idx[~whole].tolist(), inside[~whole].tolist(), strict=True):
        out.crossing[(int(ev.tid[i]), float(ev.ts[i]), int(ev.name[i]), float(ev.dur[i]))] = u
    return out


def _combine_spots(parts: list[SpotPart], names: list[str], n: int) -> list[HostSpot]:
    """The host ranges that lie mostly inside the part's time, by time inside, heaviest first."""
    totals: dict[int, float] = {}
    for p in parts:
        for k, u in p.totals.items():
            totals[k] = totals.get(k, 0.0) + u
    crossing: dict[tuple[int, float, int, float], float] = {}
    for p in parts:
        for key, u in p.crossing.items():
            crossing[key] = crossing.get(key, 0.0) + u
    for (_, _, name, dur), u in crossing.items():
        if u >= SPOT_INSIDE_SHARE * dur:
            totals[name] = totals.get(name, 0.0) + u
    order = sorted(totals, key=lambda k: (-totals[k], k))[:SPOTS]
    return [HostSpot(names[k], totals[k] / n / 1000.0) for k in order]
