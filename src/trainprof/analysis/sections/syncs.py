"""Host-device synchronisations: calls that block the CPU until the GPU catches up, and the ops
and source lines that make them.

A sync is a runtime/driver call that blocks (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
``cudaEventSynchronize``, plain ``cudaMemcpy``, their HIP and driver spellings), or a host-blocking
``cuda_sync`` event whose call was not recorded. Its op is the innermost CPU op around the call;
its caller the outermost; its cause the outermost known culprit on that chain (``aten::item``,
``aten::nonzero``, ``.cpu()``...). Time blocked is the call's duration, in µs.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.callsites import node_sources
from trainprof.analysis.calls.calltree import CallTree, call_tree
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.exposure import span_sets
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.parts import Carried, carried, carried_over, part_of
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.analysis.tabular import share
from trainprof.structs import Derived, Record
from trainprof.trace.model import (
    LAUNCH_KINDS,
    SYNC_KINDS,
    Kind,
    Trace,
    sync_call_kind,
    sync_cause,
)

#: The cause given to a device-wide sync outside any op.
EXPLICIT_SYNC = "torch.cuda.synchronize()"
#: ...and to one that comes after the last host op: the profiler's own when it stops.
PROFILER_SYNC = "torch.cuda.synchronize() after the last op: the profiler's own, when it stops"


class SyncSite(Record):
    """Syncs with the same call, ops and source line."""

    call: str  # e.g. cudaStreamSynchronize
    kind: str  # device, stream, event, memcpy
    op: str | None  # innermost CPU op around the call
    caller: str | None  # outermost CPU op around it (what the Python code called)
    cause: str | None  # why, when the chain holds a known culprit
    source: str | None  # the user's line, when the trace has stacks or Python frames
    count: int
    total_us: float
    max_us: float
    #: GPU idle from the end of each call to the next device work, inside its step: what the
    #: sync costs the device while the host refills the queue.
    gpu_idle_after_us: float = 0.0


class StepSyncs(Record):
    step: int
    count: int
    blocked_us: float


class SyncStats(Record):
    """Every sync of one trace, grouped by call site (most time blocked first)."""

    json_derived = (Derived("mean_per_step", "blocked_pct"),)

    count: int  # every sync of the trace, the profiler's own included
    blocked_us: float
    blocked_pct: float | None  # of the step time: the loop's syncs (below) only
    per_step: list[StepSyncs]  # the loop's syncs, step by step
    sites: list[SyncSite]
    has_sources: bool
    #: The syncs the training loop makes: inside a step, and not the profiler's own.
    loop_count: int = 0
    loop_blocked_us: float = 0.0
    loop_gpu_idle_after_us: float = 0.0
    #: Per sync, the smaller of its blocked time and the GPU idle after it: how far ahead the
    #: host would have been without it, up to the idle time that could shrink.
    loop_avoidable_us: float = 0.0
    loop_avoidable_pct: float | None = None
    profiler_syncs: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def mean_per_step(self) -> float | None:
        return sum(s.count for s in self.per_step) / len(self.per_step) if self.per_step else None

    def to_pandas(self) -> Any:
        return data_frame([s.to_dict() for s in self.sites])


#: A site's figures while windows are merged: count, total µs, max µs, GPU idle after µs.
_Figures = list

_SiteKey = tuple  # (call, kind, op, caller, cause, source)


class _Undecided(msgspec.Struct):
    """A device-wide sync outside any op after the window's last op: the profiler's own only
    if no later window has an op ending after it (its cause waits for that)."""

    ts: float
    end: float
    dur: float
    idle_after: float
    step: int | None  # step number, None outside every step
    call: str
    source: str | None


class _Part(msgspec.Struct):
    """One window's syncs: sites (and undecided syncs) in order of first appearance, figures
    for its own steps."""

    entries: list[tuple[_SiteKey, _Figures] | _Undecided]
    last_op_end: float
    count: int
    blocked_us: float
    unmatched: int
    has_sources: bool
    step_counts: list[int]
    step_blocked: list[float]
    step_numbers: list[int]
    loop_count: int
    loop_gpu_idle_after_us: float
    loop_avoidable_us: float
    any_busy: bool  # the part has device work (the GPU idle after a sync is measured)
    #: Loop syncs still blocking at the part's end, and the window's own at its start.
    running: Carried


def _partial(window: Window) -> _Part:
    trace, steps, part = window.trace, window.steps, part_of(window)
    ev = trace.events
    seen, kinds, unmatched = _sync_events(trace)
    tree = call_tree(trace)
    node = tree.node_of[seen]
    op, caller, cause = _op_chain(trace, tree, node)
    op_ends = event_ends(ev)[ev.kind == Kind.CPU_OP]
    last_op_end = float(op_ends.max()) if len(op_ends) else -np.inf
    outside = np.array([o is None and k == "device" for o, k in zip(op, kinds, strict=True)],
                       dtype=bool)
    # After the window's last op: maybe the profiler's own (decided once every window is seen).
    undecided = outside & (ev.ts[seen] >= last_op_end)
    cause = [c or (EXPLICIT_SYNC if out else None)
             for c, out in zip(cause, outside, strict=True)]
    sources = node_sources(trace, tree, np.maximum(node, 0)) if len(seen) else []
    sources = [s if n >= 0 else None for s, n in zip(sources, node, strict=True)]
    step_of = _step_of(steps, ev.ts[seen])
    sets = span_sets(trace, part.start, part.end)
    idle_after = _idle_after(sets.busy, steps, event_ends(ev)[seen], step_of)
    own = part.owns_instants(ev.ts[seen])
    loop = (step_of >= 0) & ~undecided
    # Time blocked inside the own steps; a sync still running at the part's end is carried
    # into the steps after it.
    mine = own & loop
    blocked = iv.covered_in_windows(iv.union(ev.ts[seen[mine]], event_ends(ev)[seen[mine]]),
                                    steps.starts, steps.ends)
    entries: list[tuple[_SiteKey, _Figures] | _Undecided] = []
    sites: dict[_SiteKey, _Figures] = {}
    for k in np.flatnonzero(own).tolist():
        e = int(seen[k])
        call = ev.names[ev.name[e]]
        if undecided[k]:
            step = int(steps.numbers[step_of[k]]) if step_of[k] >= 0 else None
            entries.append(_Undecided(float(ev.ts[e]), float(event_ends(ev)[e]), float(ev.dur[e]),
                                      float(idle_after[k]), step, call, sources[k]))
            continue
        key = (call, kinds[k], op[k], caller[k], cause[k], sources[k])
        figures = sites.get(key)
        if figures is None:
            figures = sites[key] = [0, 0.0, -np.inf, 0.0]
            entries.append((key, figures))
        _add(figures, float(ev.dur[e]), float(idle_after[k]))
    counted = seen[mine]
    return _Part(
        entries=entries,
        last_op_end=last_op_end,
        count=int(own.sum()),
        blocked_us=float(ev.dur[seen[own]].sum()),
        unmatched=int(unmatched[own].sum()),
        has_sources=any(s is not None for s, o in zip(sources, own, strict=True) if o),
        step_counts=np.bincount(step_of[mine], minlength=len(steps)).tolist(),
        step_blocked=blocked.tolist(),
        step_numbers=steps.numbers.tolist(),
        loop_count=int(mine.sum()),
        loop_gpu_idle_after_us=float(idle_after[mine].sum()),
        loop_avoidable_us=float(np.minimum(ev.dur[counted], idle_after[mine]).sum()),
        any_busy=bool(len(sets.busy)),
        running=carried(part, ev.ts[seen[mine]], event_ends(ev)[seen[mine]],
                        ev.ts[seen[~own]], event_ends(ev)[seen[~own]]),
    )


def _add(figures: _Figures, dur: float, idle: float) -> None:
    figures[0] += 1
    figures[1] += dur
    figures[2] = max(figures[2], dur)
    figures[3] += idle


def _combine(parts: list[_Part], steps: StepWindows) -> SyncStats:
    last_op_end = max((p.last_op_end for p in parts), default=-np.inf)
    if last_op_end == -np.inf:
        last_op_end = np.inf  # no op at all: no sync is the profiler's own
    measured = any(p.any_busy for p in parts)  # else no GPU idle is measured after any sync
    sites: dict[_SiteKey, _Figures] = {}
    pos = {int(n): i for i, n in enumerate(steps.numbers)}
    counts = [c for p in parts for c in p.step_counts]
    blocked = [b for p in parts for b in p.step_blocked]
    loop_count = sum(p.loop_count for p in parts)
    idle_sum = sum(p.loop_gpu_idle_after_us for p in parts)
    avoidable = sum(p.loop_avoidable_us for p in parts)
    profiler = 0
    for p in parts:
        for entry in p.entries:
            if isinstance(entry, tuple):
                key, figures = entry
                merged = sites.setdefault(key, [0, 0.0, -np.inf, 0.0])
                merged[0] += figures[0]
                merged[1] += figures[1]
                merged[2] = max(merged[2], figures[2])
                merged[3] += figures[3]
                continue
            mine = entry.ts >= last_op_end
            key = (entry.call, "device", None, None, PROFILER_SYNC if mine else EXPLICIT_SYNC,
                   entry.source)
            _add(sites.setdefault(key, [0, 0.0, -np.inf, 0.0]), entry.dur, entry.idle_after)
            if mine:
                profiler += 1
            elif entry.step is not None:  # a loop sync after all: counted in its step
                i = pos[entry.step]
                counts[i] += 1
                blocked[i] += min(entry.end, float(steps.ends[i])) - entry.ts
                loop_count += 1
                idle_sum += entry.idle_after
                avoidable += min(entry.dur, entry.idle_after)
    if not measured:
        idle_sum = avoidable = 0.0
    # Loop syncs that block on into the steps after their window (where no other sync does).
    later = iv.covered_in_windows(carried_over([p.running for p in parts]), steps.starts,
                                  steps.ends)
    blocked = [b + x for b, x in zip(blocked, later.tolist(), strict=True)]
    site_list = [SyncSite(call=k[0], kind=k[1], op=k[2], caller=k[3], cause=k[4], source=k[5],
                          count=f[0], total_us=f[1], max_us=f[2],
                          gpu_idle_after_us=f[3] if measured else 0.0)
                 for k, f in sites.items()]
    site_list.sort(key=lambda s: (-s.total_us, -s.count, s.call))
    unmatched = sum(p.unmatched for p in parts)
    notes = [f"{unmatched} sync(s) seen only on the device side (cuda_sync events without "
             "their host call): no op or source line for them."] if unmatched else []
    step_time = float(steps.durations.sum())
    loop_blocked = float(sum(blocked))
    return SyncStats(
        count=sum(p.count for p in parts),
        blocked_us=sum(p.blocked_us for p in parts),
        blocked_pct=share(loop_blocked, step_time),
        per_step=[StepSyncs(step=int(num), count=int(counts[i]), blocked_us=float(blocked[i]))
                  for i, num in enumerate(steps.numbers)],
        sites=site_list,
        has_sources=any(p.has_sources for p in parts),
        notes=notes,
        loop_count=loop_count,
        loop_blocked_us=loop_blocked,
        loop_gpu_idle_after_us=idle_sum,
        loop_avoidable_us=avoidable,
        loop_avoidable_pct=share(avoidable, step_time),
        profiler_syncs=profiler,
    )


#: Blocking syncs: counted per step, time blocked, and the ops and lines that cause them;
#: computed window by window (analysis/streaming/windows.py): ``sync_stats(trace, steps)`` for a whole
#: trace.
sync_stats: WindowedSection[_Part, SyncStats] = WindowedSection(_partial, _combine, cost=0.1)


def _idle_after(busy: iv.Intervals, steps: StepWindows, ends: np.ndarray,
                step_of: np.ndarray) -> np.ndarray:
    """Per sync, the GPU idle time from its end to the next device work (``busy``), within its
    step (none after it: up to the step's end)."""
    out = np.zeros(len(ends))
    inside = step_of >= 0
    if not inside.any():
        return out
    t = ends[inside]
    step_end = steps.ends[step_of[inside]]
    i = np.searchsorted(busy.ends, t, side="right")  # first busy interval ending after t
    nxt = (np.where(i < len(busy), busy.starts[np.minimum(i, len(busy) - 1)], np.inf)
           if len(busy) else np.full(len(t), np.inf))
    out[inside] = np.clip(np.minimum(nxt, step_end) - t, 0.0, None)
    return out


def _sync_events(trace: Trace) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Blocking host calls, plus host-blocking cuda_sync events whose call is not a known sync
    (the call then counts) or was not recorded (the event itself counts, and is marked in the
    mask returned last)."""
    ev = trace.events
    # A name index belongs to one category, hence one kind: label names, then select events.
    label = np.zeros(len(ev.names), dtype=np.int8)
    for k in (*LAUNCH_KINDS, Kind.SYNC):
        for i in np.unique(ev.name[ev.kind == k]):
            found = sync_call_kind(k, ev.names[i])
            if found:
                label[i] = SYNC_KINDS.index(found) + 1
    hits = np.flatnonzero((label[ev.name] > 0) & ev.of_kind(*LAUNCH_KINDS, Kind.SYNC))
    kind_of = dict(zip(hits.tolist(), (label[ev.name[hits]] - 1).tolist(), strict=True))
    device_side = hits[ev.kind[hits] == Kind.SYNC]
    calls = set(hits[ev.kind[hits] != Kind.SYNC].tolist())
    unmatched: set[int] = set()
    if len(device_side):
        host = np.flatnonzero(ev.of_kind(*LAUNCH_KINDS) & (ev.correlation >= 0))
        by_corr = dict(zip(ev.correlation[host].tolist(), host.tolist(), strict=True))
        for e in device_side.tolist():
            call = by_corr.get(int(ev.correlation[e]))
            if call is None:
                calls.add(e)
                unmatched.add(e)
            elif call not in calls:
                calls.add(call)
                kind_of[call] = kind_of[e]
    order = np.array(sorted(calls, key=lambda e: (ev.ts[e], e)), dtype=np.int64)
    alone = np.array([e in unmatched for e in order.tolist()], dtype=bool)
    return order, [SYNC_KINDS[kind_of[int(e)]] for e in order], alone


def _op_chain(trace: Trace, tree: CallTree,
              node: np.ndarray) -> tuple[list[str | None], list[str | None], list[str | None]]:
    """Innermost op, outermost op and known cause of each call (node -1: none), walking all
    calls up the ops of the call tree together."""
    ev = trace.events
    n = len(node)
    if not n or not len(tree):
        return [None] * n, [None] * n, [None] * n
    is_op = ev.kind[tree.event] == Kind.CPU_OP
    parent_op = tree.nearest(is_op, include_self=False)
    why = {int(i): sync_cause(ev.names[i]) for i in np.unique(ev.name[tree.event[is_op]])}
    known = np.zeros(len(ev.names), dtype=bool)
    known[[i for i, w in why.items() if w]] = True
    inner = np.full(n, -1)
    outer = np.full(n, -1)
    culprit = np.full(n, -1)
    cur = np.where(node >= 0, parent_op[np.maximum(node, 0)], -1)
    while (cur >= 0).any():  # one pass per level of op nesting
        live = cur >= 0
        name = ev.name[tree.event[cur[live]]]
        inner[live] = np.where(inner[live] < 0, name, inner[live])
        outer[live] = name
        culprit[live] = np.where(known[name], name, culprit[live])
        cur[live] = parent_op[cur[live]]

    def text(ids: np.ndarray) -> list[str | None]:
        return [ev.names[i] if i >= 0 else None for i in ids]

    cause = [f"{ev.names[i]}: {why[i]}" if i >= 0 else None for i in culprit]
    return text(inner), text(outer), cause


def _step_of(steps: StepWindows, ts: np.ndarray) -> np.ndarray:
    """Index of the step window each time falls in, -1 outside every step."""
    i = np.searchsorted(steps.starts, ts, side="right") - 1
    ok = i >= 0
    ok[ok] &= ts[ok] < steps.ends[i[ok]]
    return np.where(ok, i, -1)
