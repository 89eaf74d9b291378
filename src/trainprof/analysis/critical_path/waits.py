"""The step graph's waits: syncs and blocking copies waiting for device work, streams waiting
for other streams, host threads waiting for (or started by) other threads."""

from __future__ import annotations

import numpy as np

from trainprof.analysis.critical_path.categories import (
    Category,
    kind_mask,
    member_mask,
    sync_name_codes,
)
from trainprof.analysis.critical_path.points import UNREACHED, DeviceEvents, HostPoints
from trainprof.trace.model import LAUNCH_KINDS, Trace

#: A host thread idle (inside no recorded range) for at least this long, while another thread's
#: range ended inside that gap, is taken to have waited for it (the main thread blocked in
#: ``backward()`` while the autograd thread runs the backward ops).
THREAD_WAIT_MIN_NS = 50_000
#: A device event ending this many ns after the host call returned still counts as awaited by it
#: (the two clocks are aligned to about a microsecond).
SYNC_TOLERANCE_NS = 1_000
#: A host thread that sat at least HOST_WAIT_MIN_NS in no recorded call (idle, or in the own
#: time of an annotation or a Python frame: a busy-wait on pinned memory) before some device
#: work ended, and went on at most HOST_WAKE_NS after it ended, waited for that work; so did a
#: thread polling the device (``QUERY_CALLS``) whose last poll found the work done and whose
#: poll before it did not (the work ended between them): its wait ends where that last poll
#: returned. The host's wait is inferred from timing.
HOST_WAIT_MIN_NS = 20_000
HOST_WAKE_NS = 5_000


def other_stream_ends(d: DeviceEvents, device_of: np.ndarray) -> np.ndarray:
    """Per device event, the position of the latest event of the same step and device on
    another stream that ended at or before it started (-1 for none)."""
    group = d.step * 4096 + device_of
    # Every (step, device) group's events by end, the groups one after another; each event's
    # search runs within its own group's stretch (``lo`` to its hit).
    by_end = np.lexsort((d.end, group))
    ends, grouped = d.end[by_end], group[by_end]
    cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    bounds = np.r_[0, cuts, len(by_end)]
    lo = np.empty(len(by_end), dtype=np.int64)
    hit = np.empty(len(by_end), dtype=np.int64)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):  # a handful
        members = by_end[a:b]
        lo[members] = a
        hit[members] = a + np.searchsorted(ends[a:b], d.start[members], side="right") - 1
    found = np.full(len(by_end), -1, dtype=np.int64)
    todo = np.ones(len(by_end), dtype=bool)
    for _ in range(8):  # skip events of the same stream just before
        inside = hit >= lo
        ok = todo & inside
        cand = by_end[np.maximum(hit, 0)]
        other = ok & (d.chain_key[cand] != d.chain_key)
        found[other] = cand[other]
        todo &= ~other & inside
        hit -= 1
    return found


def awaited(d: DeviceEvents, step_start: np.ndarray, step: np.ndarray, call_start: np.ndarray,
             call_end: np.ndarray) -> np.ndarray:
    """For host calls that block, the device event each waited for: of the step's device work
    launched before the call, the one ending last before the call returned (-1 for none: the
    device was already idle when the call began)."""
    if not len(d.event):
        return np.full(len(step), -1, dtype=np.int64)
    span = np.int64(2**44)
    if d.by_end is None:  # the same for every search of one graph
        rel = np.clip(d.end - step_start[d.step], 0, span - 1)
        order = np.argsort(d.step * span + rel, kind="stable")
        d.by_end = order, (d.step * span + rel)[order]
    order, keys = d.by_end
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


def typical_launch_lag(d: DeviceEvents, device_of: np.ndarray) -> int:
    """The median time from a launch call's start to its work starting, over work launched
    onto an idle device: no work of any stream or step running on its device from the launch
    to the start (a launch that waited behind other work says nothing of launch lag: with the
    host far ahead, such a "lag" is the queue's length)."""
    if not len(d.event):
        return 0
    busy = np.maximum(_busy_before(device_of, d.start, d.end), d.before)
    idle = (d.launch_point >= 0) & (busy <= d.issued) & (d.start >= d.issued)
    lags = (d.start - d.issued)[idle]
    return int(np.median(lags)) if len(lags) else 0


def _busy_before(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per event, the latest end of the events of its device that started before it (or at the
    same time, earlier in order): until then the device was busy (UNREACHED for none)."""
    t0, span = int(start.min()), int(start.max() - start.min()) + 1
    if (int(device.max()) - int(device.min()) + 1) * span < 2**62:  # one key: one sort
        order = np.argsort((device - device.min()) * np.int64(span) + (start - t0),
                           kind="stable")
    else:
        order = np.lexsort((start, device))
    ends = end[order].astype(np.int64)
    dev = device[order]
    # A running maximum per device: offset each device's ends above the last's.
    first = np.r_[True, dev[1:] != dev[:-1]]
    span = int(ends.max() - ends.min()) + 1
    offset = np.cumsum(first) * np.int64(span)
    run = np.maximum.accumulate(ends - ends.min() + offset)
    prev = np.r_[UNREACHED, run[:-1] - offset[:-1] + ends.min()]
    prev[first] = UNREACHED
    out = np.empty(len(start), dtype=np.int64)
    out[order] = prev
    return out


def sync_waits(trace: Trace, host: HostPoints, d: DeviceEvents, starts: np.ndarray, n_threads: int,
                offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(device end point, host end point) of every sync call and the work it waited for."""
    ev = trace.events
    ends = np.flatnonzero(~host.is_start)
    e = host.event[ends]
    launch = kind_mask(ev.kind[e], LAUNCH_KINDS)
    is_sync = launch & member_mask(ev.name[e], sync_name_codes(trace), len(ev.names))
    ends, e = ends[is_sync], e[is_sync]
    own = ends - 1  # the call's own start point, right before its end
    elastic = (own >= 0) & (host.event[np.maximum(own, 0)] == e) & host.is_start[np.maximum(own, 0)]
    ends = ends[elastic]
    step = host.chain_key[ends] // (n_threads + 1)
    found = awaited(d, starts, step, host.time[ends - 1], host.time[ends])
    ok = found >= 0
    return offset + 2 * found[ok] + 1, ends[ok]


def thread_waits(host: HostPoints, chain: np.ndarray, category: np.ndarray,
                  n_threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(other thread's end point, point) for long idle gaps of a host thread that another
    thread's range ended inside: the later point waited for it (THREAD_WAIT_MIN_NS)."""
    t = host.time
    # Points after a long gap, inside their chain (not its head), in no recorded range.
    idle = np.zeros(len(t), dtype=bool)
    if len(t):
        idle[1:] = np.diff(t) >= THREAD_WAIT_MIN_NS
        idle[1:] &= chain[1:] == chain[:-1]
    idle &= category == Category.UNTRACED_HOST
    idle = np.flatnonzero(idle)
    ends = np.flatnonzero(~host.is_start)
    if not len(idle) or not len(ends):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def step(points: np.ndarray) -> np.ndarray:
        return host.chain_key[points] // (n_threads + 1)

    span = np.int64(2**44)
    key = step(ends) * span + t[ends] - t.min()
    by_key = np.argsort(key, kind="stable")
    keys, ends = key[by_key], ends[by_key]
    idle_step = step(idle)
    hit = np.searchsorted(keys, idle_step * span + t[idle] - t.min(), side="right") - 1
    found = np.full(len(idle), -1, dtype=np.int64)
    todo = np.ones(len(idle), dtype=bool)
    for _ in range(8):  # skip the waiting thread's own ends
        cand = ends[np.maximum(hit, 0)]
        ok = todo & (hit >= 0) & (step(cand) == idle_step)
        other = ok & (chain[cand] != chain[idle])
        found[other] = cand[other]
        todo &= ok & ~other
        hit -= 1
    inside = (found >= 0) & (t[np.maximum(found, 0)] > t[np.maximum(idle - 1, 0)])
    return found[inside], idle[inside]


def thread_starts(host: HostPoints, chain: np.ndarray, head: np.ndarray,
                   n_threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(other thread's point, head) for host threads that start working inside a step (the
    autograd thread when the main thread calls ``backward()``): the latest point of another
    thread at or before the head, which released it. The step's first thread keeps its start."""
    t = host.time
    if not len(t):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    step = host.chain_key // (n_threads + 1)
    # The points come sorted by step: each step's first time is its stretch's least.
    stretch = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    first = np.full(int(step[-1]) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    first[step[stretch]] = np.minimum.reduceat(t, stretch)
    heads = np.flatnonzero(head)
    heads = heads[t[heads] - first[step[heads]] >= THREAD_WAIT_MIN_NS]
    key = step * np.int64(2**44)
    del step  # read again below at the points it is needed at only
    key += t
    key -= t.min()
    by_key = np.argsort(key, kind="stable")
    hit = np.searchsorted(key[by_key], key[heads], side="right") - 1
    del key
    head_step = host.chain_key[heads] // (n_threads + 1)
    found = np.full(len(heads), -1, dtype=np.int64)
    todo = np.ones(len(heads), dtype=bool)
    for _ in range(8):  # skip the head's own points at the same time
        cand = by_key[np.maximum(hit, 0)]
        ok = todo & (hit >= 0) & (host.chain_key[cand] // (n_threads + 1) == head_step)
        other = ok & (chain[cand] != chain[heads])
        found[other] = cand[other]
        todo &= ok & ~other
        hit -= 1
    return found[found >= 0], heads[found >= 0]


def blocking_launches(host: HostPoints, d: DeviceEvents,
                      offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(device end point, host end point) of launch calls that returned only after their own
    work ended (``cudaMemcpy``, a copy to pageable memory); device points start at ``offset``."""
    has_launch = (d.launch_point >= 0) & (d.launch_end_point >= 0)
    returned = host.time[np.maximum(d.launch_end_point, 0)] if len(host.time) else d.end
    blocking = has_launch & (d.end <= returned + SYNC_TOLERANCE_NS) & (d.end >= d.issued)
    return offset + 2 * np.flatnonzero(blocking) + 1, d.launch_end_point[blocking]


def timed_waits(host: HostPoints, d: DeviceEvents, starts: np.ndarray, n_threads: int,
                offset: int, segments: tuple[np.ndarray, np.ndarray | None], head: np.ndarray,
                taken: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(device end point, host point) of host waits for the device seen in the timing only
    (HOST_WAIT_MIN_NS): a stretch of a thread in no call, or in the own time of annotations
    and Python frames, or polling (QUERY_CALLS), that ends just after device work launched
    before it ended. ``segments``: whether the segment into each point may hide a wait, and
    whether it is a poll (None: no polls), as ``host_categories`` finds; ``head``: the first
    point of each chain; ``taken``: points already waiting for another
    thread or blocking call. Device points start at ``offset``."""
    t = host.time
    n = len(t)
    if not n or not len(d.event):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    waiting, polling = segments
    waiting[head] = False
    # Each stretch of waiting segments: the point before it (its start) and its last point.
    edges = np.diff(np.concatenate(([False], waiting, [False])).view(np.int8))
    del waiting
    first = np.flatnonzero(edges == 1) - 1  # a chain's head never waits: first >= 0
    last = np.flatnonzero(edges == -1) - 1
    del edges
    free = ~taken[last]
    first, last = first[free], last[free]
    # A polling loop's last poll (the end point of the last query call), and the start of the
    # one before it: the work was not done then, and was done when the last one returned.
    polls = np.flatnonzero(polling) if polling is not None else np.zeros(0, dtype=np.int64)
    k = np.searchsorted(polls, last, side="right") - 1  # the last poll at or before
    q = np.where(k >= 0, polls[np.maximum(k, 0)] if len(polls) else -1, -1)
    polled = q > first
    # Stretches too short to hold a wait are not searched.
    keep = polled | (t[last] - t[first] >= HOST_WAIT_MIN_NS - SYNC_TOLERANCE_NS)
    last, first, q, polled, k = last[keep], first[keep], q[keep], polled[keep], k[keep]
    if not len(last):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    before = np.where(k >= 1, polls[np.maximum(k - 1, 0)] if len(polls) else -1, -1)
    lower = np.where(polled & (before > first), t[np.maximum(before - 1, 0)], t[first])
    lower[~polled] += HOST_WAIT_MIN_NS
    returned = np.where(polled, t[np.maximum(q, 0)], t[last])
    step = host.chain_key[last] // (n_threads + 1)
    found = awaited(d, starts, step, t[first], returned)
    end = d.end[np.maximum(found, 0)]
    # A poll loop ends where the last poll returned (it said the work was done); a stretch
    # without polls where the thread went on, soon after the work ended.
    ok = (found >= 0) & (end >= lower) & (polled | (t[last] - end <= HOST_WAKE_NS))
    return offset + 2 * found[ok] + 1, np.where(polled, q, last)[ok]
