"""Work outside the training phases: host ops that run in a step's ``other`` phase.

The phases (analysis/overview/phases.py) claim data, optimizer, backward and forward; the rest
of the step is ``other``. Here: how much of it recorded host ops fill (a CPU op or a
``record_function`` range running, with the Python glue of under GLUE_US between two of them;
blocking waits on the device and the host ops of distributed training (collectives, DDP's
reducer, FSDP's hooks) left out: a host waiting for the GPU or for its peers is not work), per step, and which outermost ops fill it, with their call sites (with
``with_stack=True``). A validation pass inside every step, checkpoint writes and metric
computation show up here. See docs/metrics.md, "Work outside the training phases".
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.callsites import node_sources
from trainprof.analysis.calls.calltree import call_tree
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.phases import phase_intervals
from trainprof.analysis.streaming.windows import Window, owns
from trainprof.lazy import LazyPattern
from trainprof.structs import Derived, Record
from trainprof.trace.model import (
    FLAG_COMM,
    FLAG_DATALOADER,
    FLAG_OPTIMIZER,
    Kind,
    Trace,
    sync_call_kind,
)

#: Gaps shorter than this between host ops are the Python between them (a loop of ops: a
#: validation pass), counted as the work; longer ones are Python no op records (logging,
#: host_time's ``after_optimizer``), left out.
GLUE_US = 100.0
#: An op is named as outside work when at least this share of it lies in that time.
INSIDE_SHARE = 0.8
#: How many ops (name and call site) are named.
TOP_WORK = 5
#: Host ranges of distributed training besides the communication ops themselves (which the trace
#: model flags): DDP's reducer, FSDP's hooks, c10d's dispatch and its parameter records.
_DISTRIBUTED = LazyPattern(r"^(?:torch\.distributed\.|FSDP::|c10d::|record_param_comms)")


class OutsideWork(Record):
    """An outermost op (or annotation) in the time outside the training phases."""

    name: str
    source: str | None  # the user's line that called it, when stacks or frames are recorded
    calls: int
    ms_per_step: float


class OutsideTraining(Record):
    """Host ops running outside data, forward, backward and the optimizer, per step."""

    json_derived = (Derived("median_pct", "mean_pct"),)

    per_step_pct: list[float]  # of each step's time, in step order
    mean_pct: float  # of all step time
    ms_per_step: float
    top: list[OutsideWork] = field(default_factory=list)

    @property
    def median_pct(self) -> float:
        return float(np.median(self.per_step_pct)) if self.per_step_pct else 0.0


class OutsidePart(msgspec.Struct):
    """One window's own steps: µs of outside work and of the step, and µs and calls per
    (op name index, call site)."""

    work_us: np.ndarray
    step_us: np.ndarray
    items: dict[tuple[int, str | None], tuple[int, float]]


def outside_part(window: Window) -> OutsidePart:
    """The outside work of the window's own steps."""
    trace, steps = window.trace, window.steps
    work = outside_work(trace, window)
    items: dict[tuple[int, str | None], tuple[int, float]] = {}
    if len(work):
        items = _outermost_items(trace, window, work)
    return OutsidePart(iv.covered_in_windows(work, steps.starts, steps.ends),
                       steps.durations.astype(np.float64), items)


def outside_work(trace: Trace, window: Window) -> iv.Intervals:
    """The ``other`` phase's time covered by host ops, less the blocking waits on the device."""
    ev = trace.events
    other = phase_intervals(trace, window.steps)["other"]
    if not len(other):
        return other
    ops = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)
                         & ~ev.flagged(FLAG_DATALOADER) & ~ev.flagged(FLAG_OPTIMIZER))
    ops = ops[_near(other, ev.ts[ops], event_ends(ev)[ops])]
    if not len(ops):
        return iv.Intervals.empty()
    busy = iv.intersect(other, _bridged(iv.union(ev.ts[ops], event_ends(ev)[ops]), GLUE_US))
    waits = np.union1d(_blocking_waits(trace), _distributed_ops(trace))  # in time order
    return iv.subtract(busy, iv.union(ev.ts[waits], event_ends(ev)[waits]))


def _distributed_ops(trace: Trace) -> np.ndarray:
    """The host ops of distributed training itself (collectives and sends, DDP's reducer, FSDP's
    hooks): part of the training step wherever they fall, never work outside it."""
    ev = trace.events
    ops = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION))
    codes = ev.name[ops]
    wanted = np.zeros(len(ev.names), dtype=bool)
    wanted[codes] = True  # the names used, by a table (no sort)
    used = np.flatnonzero(wanted)
    wanted[used] = [bool(_DISTRIBUTED.match(ev.names[c])) for c in used.tolist()]
    return ops[wanted[codes] | ev.flagged(FLAG_COMM)[ops]]



def _near(s: iv.Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which ranges overlap ``s`` or lie within GLUE_US of it (glue may join them to it)."""
    i = np.searchsorted(s.ends + GLUE_US, starts, side="right")
    return (i < len(s)) & (s.starts[np.minimum(i, len(s) - 1)] - GLUE_US < ends)


def _bridged(s: iv.Intervals, gap: float) -> iv.Intervals:
    """``s`` with every gap shorter than ``gap`` filled."""
    if len(s) < 2:
        return s
    keep = np.flatnonzero(s.starts[1:] - s.ends[:-1] >= gap)
    return iv.Intervals(s.starts[np.r_[0, keep + 1]], s.ends[np.r_[keep, len(s) - 1]])


def _blocking_waits(trace: Trace) -> np.ndarray:
    """The host calls that block on the device (synchronize, synchronous copies)."""
    ev = trace.events
    kind = ev.kind
    calls = np.flatnonzero((kind == Kind.RUNTIME) | (kind == Kind.DRIVER) | (kind == Kind.SYNC))
    codes = ev.name[calls]
    # A name index belongs to one category, hence one kind: each name's kind by a table.
    kind_of = np.full(len(ev.names), -1, dtype=np.int64)
    kind_of[codes] = kind[calls]
    used = np.flatnonzero(kind_of >= 0)
    blocking = np.zeros(len(ev.names), dtype=bool)
    blocking[used] = [sync_call_kind(Kind(k), ev.names[i]) is not None
                      for i, k in zip(used.tolist(), kind_of[used].tolist(), strict=True)]
    return calls[blocking[codes]]


def _outermost_items(trace: Trace, window: Window, work: iv.Intervals
                     ) -> dict[tuple[int, str | None], tuple[int, float]]:
    """Per (name, call site): calls and µs inside ``work`` of the outermost ops lying in it."""
    ev = trace.events
    tree = call_tree(trace)
    event = tree.event
    kind = ev.kind[event]
    cand = np.flatnonzero(((kind == Kind.CPU_OP) | (kind == Kind.USER_ANNOTATION))
                          & ~tree.merged & owns(window, ev.ts[event]) & (ev.dur[event] > 0)
                          & (event_ends(ev)[event] > work.starts[0])
                          & (ev.ts[event] < work.ends[-1]))
    inside = iv.covered_in_windows(work, ev.ts[event[cand]], event_ends(ev)[event[cand]])
    cand_in = inside >= INSIDE_SHARE * ev.dur[event[cand]]
    mark = np.zeros(len(tree), dtype=bool)
    mark[cand[cand_in]] = True
    outer = mark[cand] & (tree.nearest(mark, include_self=False)[cand] < 0)
    nodes, times = cand[outer], inside[outer]
    items: dict[tuple[int, str | None], tuple[int, float]] = {}
    for node, us, source in zip(nodes.tolist(), times.tolist(),
                                node_sources(trace, tree, nodes), strict=True):
        key = (int(ev.name[event[node]]), source)
        calls, total = items.get(key, (0, 0.0))
        items[key] = (calls + 1, total + us)
    return items


def combine_outside(parts: list[OutsidePart], names: list[str]) -> OutsideTraining | None:
    """The outside work of every window's steps; None without steps."""
    work = np.concatenate([p.work_us for p in parts]) if parts else np.zeros(0)
    step = np.concatenate([p.step_us for p in parts]) if parts else np.zeros(0)
    if not len(step) or step.sum() <= 0:
        return None
    items: dict[tuple[int, str | None], tuple[int, float]] = {}
    for p in parts:
        for key, (calls, us) in p.items.items():
            c, u = items.get(key, (0, 0.0))
            items[key] = (c + calls, u + us)
    n = len(step)
    order = sorted(items, key=lambda k: (-items[k][1], k[0], k[1] or ""))[:TOP_WORK]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_step = np.where(step > 0, work / step * 100.0, 0.0)
    return OutsideTraining(
        per_step_pct=[float(x) for x in per_step],
        mean_pct=float(work.sum() / step.sum() * 100.0),
        ms_per_step=float(work.sum()) / n / 1000.0,
        top=[OutsideWork(names[k[0]], k[1], items[k][0], items[k][1] / n / 1000.0)
             for k in order],
    )
