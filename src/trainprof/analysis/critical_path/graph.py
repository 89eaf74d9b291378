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

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import msgspec
import numpy as np

from trainprof.analysis.calls.calltree import call_tree
from trainprof.analysis.critical_path.categories import (
    Category,
    ItemTable,
    device_categories,
    host_categories,
    loader_mask,
)
from trainprof.analysis.critical_path.points import (
    UNREACHED,
    DeviceEvents,
    device_events,
    host_points,
    host_windows,
    to_ns,
)
from trainprof.analysis.critical_path.waits import (
    blocking_launches,
    other_stream_ends,
    sync_waits,
    thread_starts,
    thread_waits,
    timed_waits,
    typical_launch_lag,
)
from trainprof.analysis.overview.steps import StepWindows, launch_links
from trainprof.trace.model import Trace

__all__ = ["UNREACHED", "StepGraph", "build_graph", "index_dtype"]


class StepGraph(msgspec.Struct, dict=True):
    """Every step's graph in one set of columns; points are grouped by chain, chains by step."""

    time: np.ndarray  # int64 ns, the recorded time of each point
    chain: np.ndarray  # int32 (int64 past 2**31 points) chain of each point
    weight: np.ndarray  # int64 ns of the chain edge into each point (0 at a chain's head)
    category: np.ndarray  # uint8 Category of that edge
    item: np.ndarray  # int32 index into ``items`` of that edge, -1 for none
    event: np.ndarray  # int32 (int64 past 2**31 events) the trace event owning that edge, or -1
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

    @cached_property
    def heads(self) -> np.ndarray:
        """Boolean mask of the first point of each chain (found once: read-only)."""
        out = np.r_[True, self.chain[1:] != self.chain[:-1]] if len(self.chain) else \
            np.zeros(0, dtype=bool)
        out.flags.writeable = False
        return out


def build_graph(trace: Trace, steps: StepWindows) -> StepGraph:
    """The dependency graph of every step of a trace (see the module docstring)."""
    starts, ends = to_ns(steps.starts), to_ns(steps.ends)
    n_threads = len(trace.threads)
    ev = trace.events
    table = ItemTable()
    host = host_points(trace, *host_windows(trace, steps))
    h = len(host.time)
    # The host points are sorted by chain key: a chain starts wherever the key changes.
    h_head = np.r_[True, host.chain_key[1:] != host.chain_key[:-1]] if h else \
        np.zeros(0, dtype=bool)
    h_keys = host.chain_key[h_head]
    h_chain = np.cumsum(h_head) - 1
    h_weight = np.where(h_head, 0, np.diff(host.time, prepend=host.time[:1]))
    # The event owning the segment *into* each point: the owners shifted by one, in place (the
    # host points' own column is read nowhere else).
    owner = host.owner_event
    if h:
        owner[1:] = owner[:-1]
    owner[h_head] = -1
    links = launch_links(trace)
    h_cat, h_item, h_waiting, h_polls = host_categories(
        trace, owner, _inside_loader(trace, owner), links[1], table)

    d = device_events(trace, host, starts, ends, n_threads, links)
    del links
    m = len(d.event)
    d_head = np.r_[True, d.chain_key[1:] != d.chain_key[:-1]] if m else np.zeros(0, dtype=bool)
    prev_end = np.where(d_head, UNREACHED, np.r_[UNREACHED, d.end[:-1]])
    other = other_stream_ends(d, ev.device[d.event].astype(np.int64))
    c_other = np.where(other >= 0, d.end[np.maximum(other, 0)], UNREACHED)
    lag0 = typical_launch_lag(d, ev.device[d.event].astype(np.int64))
    waited = d.start - d.issued
    c_launch = np.where(d.launch_point >= 0, d.issued + np.minimum(lag0, waited), UNREACHED)
    # A stream's first event in a step may wait for the step before's work on that stream:
    # it then starts at its recorded time (the other step is not replayed with this one).
    carried = np.where(d_head, d.before, UNREACHED)
    # The latest input explains the start; on a tie, recorded device work (BINDING order).
    binding = np.argmax(np.stack([prev_end, c_other, carried, c_launch]), axis=0)
    unexplained = (prev_end == UNREACHED) & (c_launch == UNREACHED) & (c_other == UNREACHED)
    unexplained |= binding == BY_CARRIED
    d_cat, d_item = device_categories(trace, d.event, table)

    n = h + 2 * m
    time = np.empty(n, dtype=np.int64)
    time[:h], time[h::2], time[h + 1::2] = host.time, d.start, d.end
    host.time = time[:h]  # the same values: one copy of them, not two
    chain = np.empty(n, dtype=index_dtype(n))
    chain[:h] = h_chain
    h_chain = chain[:h]
    chain[h::2] = chain[h + 1::2] = len(h_keys) + d.chain_key
    weight = np.empty(n, dtype=np.int64)
    weight[:h] = h_weight
    del h_weight
    weight[h::2] = np.where(binding == BY_STREAM, np.maximum(d.start - prev_end, 0), 0)
    weight[h::2][d_head] = 0
    weight[h + 1::2] = d.end - d.start
    category = np.empty(n, dtype=np.uint8)
    category[:h], category[h::2], category[h + 1::2] = h_cat, Category.LAUNCH_OVERHEAD, d_cat
    h_cat = category[:h]
    item = np.full(n, -1, dtype=index_dtype(n))
    item[:h], item[h + 1::2] = h_item, d_item
    event = np.full(n, -1, dtype=index_dtype(len(ev)))
    event[:h], event[h + 1::2] = owner, d.event
    event[h::2] = d.event
    host.owner_event = event[:h]  # the same values, now: its own copy can go
    del owner, h_item
    anchor = np.full(n, UNREACHED, dtype=np.int64)
    anchor[:h][h_head] = host.time[h_head]
    anchor[h::2][unexplained] = d.start[unexplained]

    d_start_pt, d_end_pt = h + 2 * np.arange(m), h + 2 * np.arange(m) + 1
    edges = []
    has_launch = d.launch_point >= 0
    edges.append((d.launch_point[has_launch], d_start_pt[has_launch],
                  np.where(binding == BY_LAUNCH, waited, np.minimum(lag0, waited))[has_launch],
                  Category.LAUNCH_OVERHEAD))
    by_other = binding == BY_OTHER_STREAM
    edges.append((d_end_pt[other[by_other]], d_start_pt[by_other],
                  (d.start - c_other)[by_other], Category.SYNC_WAIT))
    # A launch call that returned only after its own work ended (cudaMemcpy, a pageable copy).
    waits = [blocking_launches(host, d, h)]
    waits.append(sync_waits(trace, host, d, starts, n_threads, h))
    by_thread = thread_waits(host, h_chain, h_cat, n_threads)
    taken = np.zeros(h, dtype=bool)
    taken[by_thread[1]] = True
    taken[waits[0][1]] = taken[waits[1][1]] = True  # blocking calls' ends: already waits
    waits.append(by_thread)
    waits.append(timed_waits(host, d, starts, n_threads, h, (h_waiting, h_polls), h_head,
                             taken))
    del h_waiting, h_polls
    del taken
    for src, dst in waits:
        edges.append((src, dst, time[dst] - time[src], Category.SYNC_WAIT))
        weight[dst] = 0  # the call's own time stretches to the device's: elastic
    src, dst = thread_starts(host, h_chain, h_head, n_threads)
    edges.append((src, dst, time[dst] - time[src], Category.UNTRACED_HOST))
    anchor[dst] = UNREACHED  # started by the other thread, not at a fixed time
    src, dst, lag, ccat = _concat_edges(edges)
    chain_step = np.r_[h_keys // (n_threads + 1), _chain_steps(d)]
    # What happened before the step began (the host running ahead of the device) belongs to
    # the step before's time: a what-if of this step cannot move it.
    point_step = chain_step[chain]
    early = time <= starts[point_step]
    anchor[early] = time[early]
    # ... and what follows it cannot move before the step's start.
    after_early = ~early & np.r_[False, early[:-1] & (chain[1:] == chain[:-1])]
    after_early[dst[early[src] & ~early[dst]]] = True
    anchor[after_early] = np.maximum(anchor[after_early], starts[point_step[after_early]])
    lanes = [f"host thread {trace.threads[k % (n_threads + 1)][1]}" for k in h_keys.tolist()]
    lanes += _device_lanes(trace, d)
    return StepGraph(time=time, chain=chain, weight=weight, category=category, item=item,
                     event=event, anchor=anchor, src=src, dst=dst, lag=lag,
                     cross_category=ccat, chain_step=chain_step, chain_lane=lanes,
                     step_start=starts, items=table.items, launch_lag_ns=lag0)


#: What explains a device event's start, in the order that wins a tie: the stream's previous
#: event, another stream's event (a stream wait), the step before's work on the stream, then the
#: launch (its lag is the typical one, a statistic: recorded device work ending at the same
#: time is the better evidence).
BY_STREAM, BY_OTHER_STREAM, BY_CARRIED, BY_LAUNCH = range(4)


def index_dtype(size: int) -> type[np.signedinteger]:
    """The narrowest of int32 and int64 that holds every index into ``size`` things, and -1."""
    return np.int32 if size < 2**31 else np.int64


def _inside_loader(trace: Trace, owner: np.ndarray) -> np.ndarray:
    """Whether each owner event is the DataLoader's wait or nested inside it."""
    tree = call_tree(trace)
    marked = loader_mask(trace, tree.event)
    if not marked.any():
        return np.zeros(len(owner), dtype=bool)
    inside = tree.nearest(marked) >= 0
    node = tree.node_of[np.maximum(owner, 0)]
    return (owner >= 0) & (node >= 0) & inside[np.maximum(node, 0)]


def _concat_edges(edges: Sequence[tuple[Any, Any, Any, int]]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    src = np.concatenate([np.asarray(e[0], dtype=np.int64) for e in edges])
    dst = np.concatenate([np.asarray(e[1], dtype=np.int64) for e in edges])
    lag = np.concatenate([np.asarray(e[2], dtype=np.int64) for e in edges])
    cat = np.concatenate([np.full(len(e[0]), e[3], dtype=np.uint8) for e in edges])
    return src, dst, lag, cat


def _chain_steps(d: DeviceEvents) -> np.ndarray:
    out = np.zeros(int(d.chain_key.max()) + 1 if len(d.chain_key) else 0, dtype=np.int64)
    out[d.chain_key] = d.step
    return out


def _device_lanes(trace: Trace, d: DeviceEvents) -> list[str]:
    ev = trace.events
    n = int(d.chain_key.max()) + 1 if len(d.chain_key) else 0
    first = np.zeros(n, dtype=np.int64)
    first[d.chain_key[::-1]] = d.event[::-1]
    return [f"GPU {int(ev.device[i])} stream {int(ev.stream[i])}" for i in first.tolist()]
