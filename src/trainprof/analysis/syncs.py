"""Host-device synchronisations: calls that block the CPU until the GPU catches up, and the ops
and source lines that make them.

A sync is a runtime/driver call that blocks (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
``cudaEventSynchronize``, plain ``cudaMemcpy``, their HIP and driver spellings), or a host-blocking
``cuda_sync`` event whose call was not recorded. Its op is the innermost CPU op around the call;
its caller the outermost; its cause the outermost known culprit on that chain (``aten::item``,
``aten::nonzero``, ``.cpu()``...). Time blocked is the call's duration, in µs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.callsites import node_sources
from trainprof.analysis.calltree import CallTree, call_tree
from trainprof.analysis.exposure import window_sets
from trainprof.analysis.frames import data_frame
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.tabular import share
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


@dataclass
class SyncSite:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepSyncs:
    step: int
    count: int
    blocked_us: float


@dataclass
class SyncStats:
    """Every sync of one trace, grouped by call site (most time blocked first)."""

    count: int  # every sync of the trace, the profiler's own included
    blocked_us: float
    blocked_pct: float | None  # of the step time: the loop's syncs (below) only
    per_step: list[StepSyncs]  # the loop's syncs, step by step
    sites: list[SyncSite]
    has_sources: bool
    notes: list[str] = field(default_factory=list)
    #: The syncs the training loop makes: inside a step, and not the profiler's own.
    loop_count: int = 0
    loop_blocked_us: float = 0.0
    loop_gpu_idle_after_us: float = 0.0
    #: Per sync, the smaller of its blocked time and the GPU idle after it: how far ahead the
    #: host would have been without it, up to the idle time that could shrink.
    loop_avoidable_us: float = 0.0
    loop_avoidable_pct: float | None = None
    profiler_syncs: int = 0

    @property
    def mean_per_step(self) -> float | None:
        return sum(s.count for s in self.per_step) / len(self.per_step) if self.per_step else None

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "blocked_us": self.blocked_us,
                "blocked_pct": self.blocked_pct, "mean_per_step": self.mean_per_step,
                "per_step": [asdict(s) for s in self.per_step],
                "sites": [s.to_dict() for s in self.sites], "has_sources": self.has_sources,
                "loop_count": self.loop_count, "loop_blocked_us": self.loop_blocked_us,
                "loop_gpu_idle_after_us": self.loop_gpu_idle_after_us,
                "loop_avoidable_us": self.loop_avoidable_us,
                "loop_avoidable_pct": self.loop_avoidable_pct,
                "profiler_syncs": self.profiler_syncs, "notes": self.notes}

    def to_pandas(self) -> Any:
        return data_frame([s.to_dict() for s in self.sites])


def sync_stats(trace: Trace, steps: StepWindows) -> SyncStats:
    """Blocking syncs: counted per step, time blocked, and the ops and lines that cause them."""
    ev = trace.events
    calls, kinds, notes = _sync_events(trace)
    tree = call_tree(trace)
    node = tree.node_of[calls]
    op, caller, cause = _op_chain(trace, tree, node)
    op_ends = ev.end[ev.kind == Kind.CPU_OP]
    last_op_end = float(op_ends.max()) if len(op_ends) else np.inf
    own = np.array([o is None and k == "device" and ev.ts[e] >= last_op_end
                    for e, o, k in zip(calls, op, kinds, strict=True)], dtype=bool)
    cause = [c or ((PROFILER_SYNC if mine else EXPLICIT_SYNC) if o is None and k == "device"
                   else None)
             for c, o, k, mine in zip(cause, op, kinds, own, strict=True)]
    sources = node_sources(trace, tree, np.maximum(node, 0)) if len(calls) else []
    sources = [s if n >= 0 else None for s, n in zip(sources, node, strict=True)]
    step_of = _step_of(steps, ev.ts[calls])
    idle_after = _gpu_idle_after(trace, steps, ev.end[calls], step_of)
    sites = _sites(trace, calls, kinds, op, caller, cause, sources, idle_after)
    counted = step_of >= 0
    loop = counted & ~own
    avoidable = float(np.minimum(ev.dur[calls], idle_after)[loop].sum())
    # Time blocked inside the steps: syncs on several threads at once, or one running past its
    # step's end, count once and only inside the steps (never more than the step).
    loop_calls = calls[loop]
    blocked = iv.covered_in_windows(iv.union(ev.ts[loop_calls], ev.end[loop_calls]),
                                    steps.starts, steps.ends)
    per_step = [
        StepSyncs(step=int(num), count=int((loop & (step_of == i)).sum()),
                  blocked_us=float(blocked[i]))
        for i, num in enumerate(steps.numbers)
    ]
    step_time = float(steps.durations.sum())
    return SyncStats(
        count=len(calls),
        blocked_us=float(ev.dur[calls].sum()),
        blocked_pct=share(float(blocked.sum()), step_time),
        per_step=per_step,
        sites=sites,
        has_sources=any(s is not None for s in sources),
        notes=notes,
        loop_count=int(loop.sum()),
        loop_blocked_us=float(blocked.sum()),
        loop_gpu_idle_after_us=float(idle_after[loop].sum()),
        loop_avoidable_us=avoidable,
        loop_avoidable_pct=share(avoidable, step_time),
        profiler_syncs=int(own.sum()),
    )


def _gpu_idle_after(trace: Trace, steps: StepWindows, ends: np.ndarray,
                    step_of: np.ndarray) -> np.ndarray:
    """Per sync, the GPU idle time from its end to the next device work, within its step."""
    out = np.zeros(len(ends))
    if not trace.has_gpu or not len(ends):
        return out
    busy = window_sets(trace, steps).busy
    inside = step_of >= 0
    if not len(busy) or not inside.any():
        return out
    t = ends[inside]
    step_end = steps.ends[step_of[inside]]
    i = np.searchsorted(busy.ends, t, side="right")  # first busy interval ending after t
    nxt = np.where(i < len(busy), busy.starts[np.minimum(i, len(busy) - 1)], np.inf)
    out[inside] = np.clip(np.minimum(nxt, step_end) - t, 0.0, None)
    return out


def _sync_events(trace: Trace) -> tuple[np.ndarray, list[str], list[str]]:
    """Blocking host calls, plus host-blocking cuda_sync events whose call is not a known sync
    (the call then counts) or was not recorded (the event itself counts)."""
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
    notes = []
    if len(device_side):
        host = np.flatnonzero(ev.of_kind(*LAUNCH_KINDS) & (ev.correlation >= 0))
        by_corr = dict(zip(ev.correlation[host].tolist(), host.tolist(), strict=True))
        unmatched = 0
        for e in device_side.tolist():
            call = by_corr.get(int(ev.correlation[e]))
            if call is None:
                calls.add(e)
                unmatched += 1
            elif call not in calls:
                calls.add(call)
                kind_of[call] = kind_of[e]
        if unmatched:
            notes.append(f"{unmatched} sync(s) seen only on the device side (cuda_sync events "
                         "without their host call): no op or source line for them.")
    order = np.array(sorted(calls, key=lambda e: (ev.ts[e], e)), dtype=np.int64)
    return order, [SYNC_KINDS[kind_of[int(e)]] for e in order], notes


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


def _sites(trace: Trace, calls: np.ndarray, kinds: list[str], op: list[str | None],
           caller: list[str | None], cause: list[str | None], sources: list[str | None],
           idle_after: np.ndarray) -> list[SyncSite]:
    ev = trace.events
    groups: dict[tuple, list[int]] = {}
    for k, e in enumerate(calls):
        key = (ev.names[ev.name[e]], kinds[k], op[k], caller[k], cause[k], sources[k])
        groups.setdefault(key, []).append(k)
    sites = []
    for (call, kind, o, c, why, src), members in groups.items():
        d = ev.dur[calls[members]]
        sites.append(SyncSite(call=call, kind=kind, op=o, caller=c, cause=why, source=src,
                              count=len(members), total_us=float(d.sum()), max_us=float(d.max()),
                              gpu_idle_after_us=float(idle_after[members].sum())))
    return sorted(sites, key=lambda s: (-s.total_us, -s.count, s.call))


def _step_of(steps: StepWindows, ts: np.ndarray) -> np.ndarray:
    """Index of the step window each time falls in, -1 outside every step."""
    i = np.searchsorted(steps.starts, ts, side="right") - 1
    ok = i >= 0
    ok[ok] &= ts[ok] < steps.ends[i[ok]]
    return np.where(ok, i, -1)
