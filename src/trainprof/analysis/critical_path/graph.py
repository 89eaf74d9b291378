"""The dependency graph of each step, as columns.

Every host thread and every device stream is a *chain* of points in time, one chain per step.
A host chain holds the starts and ends of the thread's ops, annotations and runtime calls in
call-tree order; the edge into a point is the time since the previous point, owned by the
innermost range open over it. A device chain holds each kernel, copy and memset as a start and
an end point. *Cross* edges join chains: a launch call's start to its kernel's start, a device
event's end to the end of the host call that waited for it (a blocking sync or copy), and one
stream's event to another stream's next event when nothing else explains the wait (a stream
wait on an event, a collective waiting for the compute stream).

Weights are chosen so that replaying the graph (``replay.py``) gives back the recorded times:
each point has one *binding* input that explains when it happened, and the others are no later.
Times are integer nanoseconds from the trace's t0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainprof.analysis.calltree import call_tree
from trainprof.analysis.critical_path.categories import (
    Category,
    ItemTable,
    device_categories,
    host_categories,
    loader_mask,
)
from trainprof.analysis.steps import StepWindows, launch_links
from trainprof.trace.model import DEVICE_KINDS, LAUNCH_KINDS, Kind, Trace, sync_call_kind

#: The sentinel time of a point that nothing reaches yet.
UNREACHED = np.int64(-(2**62))
#: A host thread idle (inside no recorded range) for at least this long, while another thread's
#: range ended inside that gap, is taken to have waited for it (the main thread blocked in
#: ``backward()`` while the autograd thread runs the backward ops).
THREAD_WAIT_MIN_NS = 50_000
#: A device event ending this many ns after the host call returned still counts as awaited by it
#: (the two clocks are aligned to about a microsecond).
SYNC_TOLERANCE_NS = 1_000


@dataclass
class StepGraph:
    """Every step's graph in one set of columns; points are grouped by chain, chains by step."""

    time: np.ndarray  # int64 ns, the recorded time of each point
    chain: np.ndarray  # int64 chain of each point
    weight: np.ndarray  # int64 ns of the chain edge into each point (0 at a chain's head)
    category: np.ndarray  # uint8 Category of that edge
    item: np.ndarray  # int64 index into ``items`` of that edge, -1 for none
    event: np.ndarray  # int64 the trace event that owns that edge, -1 for none
    anchor: np.ndarray  # int64 ns a point cannot precede (its recorded time), or UNREACHED
    src: np.ndarray  # cross edges: int64 source point
    dst: np.ndarray  # int64 destination point
    lag: np.ndarray  # int64 ns
    cross_category: np.ndarray  # uint8 Category
    chain_step: np.ndarray  # int64 step position of each chain
    chain_lane: list[str]  # "host <thread>" or "GPU <device> stream <n>"
    step_start: np.ndarray  # int64 ns, per step
    items: list[tuple[str, str]]  # (kind, name) of each what-if item
    launch_lag_ns: int = 0  # the typical launch-to-start time on an idle stream

    def __len__(self) -> int:
        return len(self.time)

    @property
    def heads(self) -> np.ndarray:
        """Boolean mask of the first point of each chain."""
        return np.r_[True, self.chain[1:] != self.chain[:-1]] if len(self.chain) else \
            np.zeros(0, dtype=bool)


def _ns(us: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(us, dtype=np.float64) * 1000.0).astype(np.int64)


def _step_of(times_ns: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The step each time falls in (the last one starting at or before it), -1 outside all."""
    pos = np.searchsorted(starts, times_ns, side="right") - 1
    ok = (pos >= 0) & (times_ns <= ends[np.maximum(pos, 0)])
    return np.where(ok, pos, -1)


@dataclass
class _Host:
    """Host boundary points, sorted by (step, thread, time)."""

    time: np.ndarray
    chain_key: np.ndarray
    owner_event: np.ndarray  # event owning the segment *after* the point, -1 for none
    event: np.ndarray  # the event whose start or end this point is
    is_start: np.ndarray


def _host_points(trace: Trace, starts: np.ndarray, ends: np.ndarray) -> _Host:
    ev = trace.events
    tree = call_tree(trace)
    n = len(tree)
    pos = np.arange(n)
    nodes_ev = tree.event
    parent_ev = np.where(tree.parent >= 0, nodes_ev[np.maximum(tree.parent, 0)], -1)
    t = np.r_[_ns(ev.ts[nodes_ev]), _ns(ev.end[nodes_ev])]
    is_start = np.r_[np.ones(n, dtype=bool), np.zeros(n, dtype=bool)]
    tid = np.r_[ev.tid[nodes_ev], ev.tid[nodes_ev]].astype(np.int64)
    # At one time: ends before starts; ends innermost first, starts outermost first.
    tie = np.r_[n + pos, n - 1 - pos]  # starts after every end, each group in tree order
    step = _step_of(t, starts, ends)
    keep = np.flatnonzero(step >= 0)
    chain_key = step[keep] * (len(trace.threads) + 1) + tid[keep]
    order = np.lexsort((tie[keep], t[keep], chain_key))
    sel = keep[order]
    owner = np.r_[nodes_ev, parent_ev][sel]
    key = chain_key[order]
    return _Host(time=t[sel], chain_key=key, owner_event=owner,
                 event=np.r_[nodes_ev, nodes_ev][sel], is_start=is_start[sel])


@dataclass
class _Device:
    """Device events of the steps, sorted by (step, device, stream, start)."""

    event: np.ndarray
    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    chain_key: np.ndarray
    launch_point: np.ndarray  # the host point of the launch call's start, -1 for none
    launch_end_point: np.ndarray  # ... and of its end
    issued: np.ndarray  # int64 ns: when the work was handed to the device (launch, or start)


def _device_events(trace: Trace, host: _Host, starts: np.ndarray, ends: np.ndarray,
                   n_threads: int) -> _Device:
    ev = trace.events
    idx = np.flatnonzero(ev.of_kind(*DEVICE_KINDS) & (ev.device >= 0) & (ev.dur >= 0))
    start_point = np.full(len(ev), -1, dtype=np.int64)
    end_point = np.full(len(ev), -1, dtype=np.int64)
    start_point[host.event[host.is_start]] = np.flatnonzero(host.is_start)
    end_point[host.event[~host.is_start]] = np.flatnonzero(~host.is_start)
    launch_of = np.full(len(ev), -1, dtype=np.int64)
    devices, launches = launch_links(trace)
    launch_of[devices] = launches
    launch = launch_of[idx]
    lp = np.where(launch >= 0, start_point[np.maximum(launch, 0)], -1)
    le = np.where(launch >= 0, end_point[np.maximum(launch, 0)], -1)
    s, e = _ns(ev.ts[idx]), _ns(ev.end[idx])
    step = np.where(lp >= 0, host.chain_key[np.maximum(lp, 0)] // (n_threads + 1),
                    _step_of(s, starts, ends))
    keep = step >= 0
    idx, lp, le, s, e, step = idx[keep], lp[keep], le[keep], s[keep], e[keep], step[keep]
    dev, stream = ev.device[idx].astype(np.int64), ev.stream[idx]
    order = np.lexsort((e, s, stream, dev, step))
    idx, lp, le, s, e, step = idx[order], lp[order], le[order], s[order], e[order], step[order]
    dev, stream = dev[order], stream[order]
    _, key = np.unique(np.stack([step, dev, stream]), axis=1, return_inverse=True)
    issued = np.where(lp >= 0, host.time[np.maximum(lp, 0)], s) if len(host.time) else s
    return _Device(event=idx, step=step, start=s, end=e, chain_key=key.ravel(),
                   launch_point=lp, launch_end_point=le, issued=issued)


def _other_stream_ends(d: _Device, device_of: np.ndarray) -> np.ndarray:
    """Per device event, the position of the latest event of the same step and device on
    another stream that ended at or before it started (-1 for none)."""
    group = d.step * 4096 + device_of
    out = np.full(len(d.event), -1, dtype=np.int64)
    for g in np.unique(group):  # one per (step, device): a handful
        members = np.flatnonzero(group == g)
        by_end = members[np.argsort(d.end[members], kind="stable")]
        hit = np.searchsorted(d.end[by_end], d.start[members], side="right") - 1
        found = np.full(len(members), -1, dtype=np.int64)
        todo = np.ones(len(members), dtype=bool)
        for _ in range(8):  # skip events of the same stream just before
            ok = todo & (hit >= 0)
            cand = by_end[np.maximum(hit, 0)]
            other = ok & (d.chain_key[cand] != d.chain_key[members])
            found[other] = cand[other]
            todo &= ~other & (hit >= 0)
            hit -= 1
        out[members] = found
    return out


def _awaited(d: _Device, step_start: np.ndarray, step: np.ndarray, call_start: np.ndarray,
             call_end: np.ndarray) -> np.ndarray:
    """For host calls that block, the device event each waited for: of the step's device work
    launched before the call, the one ending last before the call returned (-1 for none: the
    device was already idle when the call began)."""
    if not len(d.event):
        return np.full(len(step), -1, dtype=np.int64)
    span = np.int64(2**44)
    rel = np.clip(d.end - step_start[d.step], 0, span - 1)
    order = np.argsort(d.step * span + rel, kind="stable")
    keys = (d.step * span + rel)[order]
    issued = d.issued
    query = step * span + np.clip(call_end + SYNC_TOLERANCE_NS - step_start[step], 0, span - 1)
    hit = np.searchsorted(keys, query, side="right") - 1
    found = np.full(len(step), -1, dtype=np.int64)
    todo = np.ones(len(step), dtype=bool)
    for _ in range(8):  # skip work launched after the call began (another thread's)
        ok = todo & (hit >= 0)
        cand = order[np.maximum(hit, 0)]
        ok &= d.step[cand] == step
        good = ok & (issued[cand] <= call_start)
        found[good] = cand[good]
        todo &= ~good & ok
        hit -= 1
    late_enough = d.end[np.maximum(found, 0)] >= call_start
    return np.where((found >= 0) & late_enough, found, -1)


def typical_launch_lag(d: _Device, prev_end: np.ndarray, other_end: np.ndarray) -> int:
    """The median time from a launch call's start to its work starting, over work that waited
    for nothing else (its stream idle, no other stream's work ending after the launch)."""
    idle = (d.launch_point >= 0) & (prev_end <= d.issued) & (d.start >= d.issued)
    idle &= other_end <= d.issued
    lags = (d.start - d.issued)[idle]
    return int(np.median(lags)) if len(lags) else 0


def build_graph(trace: Trace, steps: StepWindows) -> StepGraph:
    """The dependency graph of every step of a trace (see the module docstring)."""
    starts, ends = _ns(steps.starts), _ns(steps.ends)
    n_threads = len(trace.threads)
    ev = trace.events
    table = ItemTable()
    host = _host_points(trace, starts, ends)
    h = len(host.time)
    h_keys, h_chain = np.unique(host.chain_key, return_inverse=True)
    h_head = np.r_[True, h_chain[1:] != h_chain[:-1]] if h else np.zeros(0, dtype=bool)
    h_weight = np.where(h_head, 0, np.diff(host.time, prepend=host.time[:1]))
    owner = np.r_[-1, host.owner_event[:-1]] if h else np.zeros(0, dtype=np.int64)
    owner = np.where(h_head, -1, owner)
    h_cat, h_item = host_categories(trace, owner, _inside_loader(trace, owner),
                                    launch_links(trace)[1], table)

    d = _device_events(trace, host, starts, ends, n_threads)
    m = len(d.event)
    d_head = np.r_[True, d.chain_key[1:] != d.chain_key[:-1]] if m else np.zeros(0, dtype=bool)
    prev_end = np.where(d_head, UNREACHED, np.r_[UNREACHED, d.end[:-1]])
    other = _other_stream_ends(d, ev.device[d.event].astype(np.int64))
    c_other = np.where(other >= 0, d.end[np.maximum(other, 0)], UNREACHED)
    lag0 = typical_launch_lag(d, prev_end, c_other)
    waited = d.start - d.issued
    c_launch = np.where(d.launch_point >= 0, d.issued + np.minimum(lag0, waited), UNREACHED)
    binding = np.argmax(np.stack([prev_end, c_launch, c_other]), axis=0)
    unexplained = (prev_end == UNREACHED) & (c_launch == UNREACHED) & (c_other == UNREACHED)
    d_cat, d_item = device_categories(trace, d.event, table)

    n = h + 2 * m
    time = np.empty(n, dtype=np.int64)
    time[:h], time[h::2], time[h + 1::2] = host.time, d.start, d.end
    chain = np.empty(n, dtype=np.int64)
    chain[:h] = h_chain
    chain[h::2] = chain[h + 1::2] = len(h_keys) + d.chain_key
    weight = np.empty(n, dtype=np.int64)
    weight[:h] = h_weight
    weight[h::2] = np.where(binding == 0, np.maximum(d.start - prev_end, 0), 0)
    weight[h::2][d_head] = 0
    weight[h + 1::2] = d.end - d.start
    category = np.empty(n, dtype=np.uint8)
    category[:h], category[h::2], category[h + 1::2] = h_cat, Category.LAUNCH_OVERHEAD, d_cat
    item = np.full(n, -1, dtype=np.int64)
    item[:h], item[h + 1::2] = h_item, d_item
    event = np.full(n, -1, dtype=np.int64)
    event[:h], event[h + 1::2] = owner, d.event
    event[h::2] = d.event
    anchor = np.full(n, UNREACHED, dtype=np.int64)
    anchor[:h][h_head] = host.time[h_head]
    anchor[h::2][unexplained] = d.start[unexplained]

    d_start_pt, d_end_pt = h + 2 * np.arange(m), h + 2 * np.arange(m) + 1
    edges = []
    has_launch = d.launch_point >= 0
    edges.append((d.launch_point[has_launch], d_start_pt[has_launch],
                  np.where(binding == 1, waited, np.minimum(lag0, waited))[has_launch],
                  Category.LAUNCH_OVERHEAD))
    by_other = binding == 2
    edges.append((d_end_pt[other[by_other]], d_start_pt[by_other],
                  (d.start - c_other)[by_other], Category.SYNC_WAIT))
    # A launch call that returned only after its own work ended (cudaMemcpy, a pageable copy).
    blocking = has_launch & (d.launch_end_point >= 0)
    blocking &= (d.end <= host.time[np.maximum(d.launch_end_point, 0)] + SYNC_TOLERANCE_NS)
    blocking &= d.end >= d.issued
    waits = [(d_end_pt[blocking], d.launch_end_point[blocking])]
    waits.append(_sync_waits(trace, host, d, starts, n_threads, h))
    waits.append(_thread_waits(host, h_chain, h_cat, n_threads))
    for src, dst in waits:
        edges.append((src, dst, time[dst] - time[src], Category.SYNC_WAIT))
        weight[dst] = 0  # the call's own time stretches to the device's: elastic
    src, dst = _thread_starts(host, h_chain, h_head, n_threads)
    edges.append((src, dst, time[dst] - time[src], Category.UNTRACED_HOST))
    anchor[dst] = UNREACHED  # started by the other thread, not at a fixed time
    src, dst, lag, ccat = _concat_edges(edges)
    chain_step = np.r_[h_keys // (n_threads + 1), _chain_steps(d)]
    lanes = [f"host thread {trace.threads[k % (n_threads + 1)][1]}" for k in h_keys.tolist()]
    lanes += _device_lanes(trace, d)
    return StepGraph(time=time, chain=chain, weight=weight, category=category, item=item,
                     event=event, anchor=anchor, src=src, dst=dst, lag=lag,
                     cross_category=ccat, chain_step=chain_step, chain_lane=lanes,
                     step_start=starts, items=table.items, launch_lag_ns=lag0)


def _inside_loader(trace: Trace, owner: np.ndarray) -> np.ndarray:
    """Whether each owner event is the DataLoader's wait or nested inside it."""
    tree = call_tree(trace)
    marked = loader_mask(trace, tree.event)
    if not marked.any():
        return np.zeros(len(owner), dtype=bool)
    inside = tree.nearest(marked) >= 0
    node = tree.node_of[np.maximum(owner, 0)]
    return (owner >= 0) & (node >= 0) & inside[np.maximum(node, 0)]


def _sync_waits(trace: Trace, host: _Host, d: _Device, starts: np.ndarray, n_threads: int,
                offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(device end point, host end point) of every sync call and the work it waited for."""
    ev = trace.events
    ends = np.flatnonzero(~host.is_start)
    e = host.event[ends]
    launch = np.isin(ev.kind[e], np.array(list(LAUNCH_KINDS), dtype=np.uint8))
    sync_name = {i for i, n in enumerate(ev.names) if sync_call_kind(Kind.RUNTIME, n)}
    is_sync = launch & np.isin(ev.name[e], np.array(sorted(sync_name), dtype=np.int32))
    ends, e = ends[is_sync], e[is_sync]
    own = ends - 1  # the call's own start point, right before its end
    elastic = (own >= 0) & (host.event[np.maximum(own, 0)] == e) & host.is_start[np.maximum(own, 0)]
    ends = ends[elastic]
    step = host.chain_key[ends] // (n_threads + 1)
    found = _awaited(d, starts, step, host.time[ends - 1], host.time[ends])
    ok = found >= 0
    return offset + 2 * found[ok] + 1, ends[ok]


def _thread_waits(host: _Host, chain: np.ndarray, category: np.ndarray,
                  n_threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(other thread's end point, point) for long idle gaps of a host thread that another
    thread's range ended inside: the later point waited for it (THREAD_WAIT_MIN_NS)."""
    t = host.time
    gap = np.r_[0, np.diff(t)] if len(t) else np.zeros(0, dtype=np.int64)
    head = np.r_[True, chain[1:] != chain[:-1]] if len(t) else np.zeros(0, dtype=bool)
    idle = np.flatnonzero(~head & (category == Category.UNTRACED_HOST)
                          & (gap >= THREAD_WAIT_MIN_NS))
    ends = np.flatnonzero(~host.is_start)
    if not len(idle) or not len(ends):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    step = host.chain_key // (n_threads + 1)
    span = np.int64(2**44)
    key = step[ends] * span + t[ends] - t.min()
    by_key = np.argsort(key, kind="stable")
    keys, ends = key[by_key], ends[by_key]
    hit = np.searchsorted(keys, step[idle] * span + t[idle] - t.min(), side="right") - 1
    found = np.full(len(idle), -1, dtype=np.int64)
    todo = np.ones(len(idle), dtype=bool)
    for _ in range(8):  # skip the waiting thread's own ends
        cand = ends[np.maximum(hit, 0)]
        ok = todo & (hit >= 0) & (step[cand] == step[idle])
        other = ok & (chain[cand] != chain[idle])
        found[other] = cand[other]
        todo &= ok & ~other
        hit -= 1
    inside = (found >= 0) & (t[np.maximum(found, 0)] > t[np.maximum(idle - 1, 0)])
    return found[inside], idle[inside]


def _thread_starts(host: _Host, chain: np.ndarray, head: np.ndarray,
                   n_threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(other thread's point, head) for host threads that start working inside a step (the
    autograd thread when the main thread calls ``backward()``): the latest point of another
    thread at or before the head, which released it. The step's first thread keeps its start."""
    t = host.time
    if not len(t):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    step = host.chain_key // (n_threads + 1)
    first = np.full(int(step.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, step, t)
    heads = np.flatnonzero(head & (t - first[step] >= THREAD_WAIT_MIN_NS))
    span = np.int64(2**44)
    key = step * span + t - t.min()
    by_key = np.argsort(key, kind="stable")
    keys = key[by_key]
    hit = np.searchsorted(keys, key[heads], side="right") - 1
    found = np.full(len(heads), -1, dtype=np.int64)
    todo = np.ones(len(heads), dtype=bool)
    for _ in range(8):  # skip the head's own points at the same time
        cand = by_key[np.maximum(hit, 0)]
        ok = todo & (hit >= 0) & (step[cand] == step[heads])
        other = ok & (chain[cand] != chain[heads])
        found[other] = cand[other]
        todo &= ok & ~other
        hit -= 1
    return found[found >= 0], heads[found >= 0]


def _concat_edges(edges):
    src = np.concatenate([np.asarray(e[0], dtype=np.int64) for e in edges])
    dst = np.concatenate([np.asarray(e[1], dtype=np.int64) for e in edges])
    lag = np.concatenate([np.asarray(e[2], dtype=np.int64) for e in edges])
    cat = np.concatenate([np.full(len(e[0]), e[3], dtype=np.uint8) for e in edges])
    return src, dst, lag, cat


def _chain_steps(d: _Device) -> np.ndarray:
    out = np.zeros(int(d.chain_key.max()) + 1 if len(d.chain_key) else 0, dtype=np.int64)
    out[d.chain_key] = d.step
    return out


def _device_lanes(trace: Trace, d: _Device) -> list[str]:
    ev = trace.events
    n = int(d.chain_key.max()) + 1 if len(d.chain_key) else 0
    first = np.zeros(n, dtype=np.int64)
    first[d.chain_key[::-1]] = d.event[::-1]
    return [f"GPU {int(ev.device[i])} stream {int(ev.stream[i])}" for i in first.tolist()]
