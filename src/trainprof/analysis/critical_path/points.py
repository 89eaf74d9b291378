"""The points of the step graph: host ranges' starts and ends in call-tree order, and the
device events of each step, as columns (times in integer ns from the trace's t0)."""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis.calls.calltree import call_tree
from trainprof.analysis.critical_path.categories import kind_mask
from trainprof.analysis.overview.steps import StepWindows
from trainprof.trace.model import DEVICE_KINDS, Kind, Trace, step_number

#: The sentinel time of a point that nothing reaches yet.
UNREACHED = np.int64(-(2**62))


def to_ns(us: np.ndarray) -> np.ndarray:
    ns = np.asarray(us, dtype=np.float64) * 1000.0
    if isinstance(ns, np.ndarray) and ns.ndim:
        return np.rint(ns, out=ns).astype(np.int64)  # rounded in place: one copy less
    return np.rint(ns).astype(np.int64)


def _ns_into(out: np.ndarray, us: np.ndarray) -> None:
    """``out[:] = to_ns(us)``, scaling and rounding ``us`` (float64) in place: no copies."""
    us *= 1000.0
    np.rint(us, out=us)
    out[:] = us


#: Sorted stretches a time column may run in for ``starts_at_or_before`` to count per stretch.
MAX_STRETCHES = 1024


def step_of(times_ns: np.ndarray, starts: np.ndarray, ends: np.ndarray,
            pos: np.ndarray | None = None) -> np.ndarray:
    """The step each time falls in (the last one starting at or before it), -1 outside all;
    ``pos``: the times' ``starts_at_or_before`` when already known."""
    pos = starts_at_or_before(starts, times_ns) if pos is None else pos
    # The end of the step starting last at or before each time (none before the first).
    last_end = np.r_[np.iinfo(np.int64).min, ends]
    out = pos - 1
    out[~(times_ns <= np.take(last_end, pos))] = -1
    return out


def starts_at_or_before(starts: np.ndarray, times: np.ndarray) -> np.ndarray:
    """How many of the sorted ``starts`` are at or before each time (``searchsorted``, side
    right), counted per sorted stretch of ``times`` when they run in a few (a thread's ranges
    in call-tree order): a pass over them, not a binary search each."""
    n, k = len(times), len(starts)
    if n < 4096 or not k or (k > 1 and bool((starts[1:] < starts[:-1]).any())):
        return np.searchsorted(starts, times, side="right")
    cuts = np.flatnonzero(times[1:] < times[:-1]) + 1
    if len(cuts) >= MAX_STRETCHES:
        return np.searchsorted(starts, times, side="right")
    bounds = np.r_[0, cuts, n].tolist()
    # Each stretch: +1 where each start is first reached, -k at its end (the next stretch
    # counts from 0); the running sum is the count.
    firsts = [a + np.searchsorted(times[a:b], starts, side="left")
              for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    marks = np.bincount(np.concatenate(firsts), minlength=n + 1)
    marks[bounds[1:]] -= k
    return np.cumsum(marks[:n])


def ends_at_or_before(starts: np.ndarray, begin: np.ndarray, end: np.ndarray,
                      at_begin: np.ndarray) -> np.ndarray:
    """``starts_at_or_before`` the ends of ranges from ``begin`` (``at_begin``: its count):
    the same as at the begin for a range that no step starts inside, searched for the rest."""
    if len(starts) > 1 and bool((starts[1:] < starts[:-1]).any()):
        return np.searchsorted(starts, end, side="right")  # unsorted: numpy's search as is
    nxt = np.append(starts, np.iinfo(np.int64).max)[at_begin]
    out = at_begin.copy()
    moved = np.flatnonzero(~((end >= begin) & (end < nxt)))
    out[moved] = np.searchsorted(starts, end[moved], side="right")
    return out


class HostPoints(msgspec.Struct):
    """Host boundary points, sorted by (step, thread, time)."""

    time: np.ndarray
    chain_key: np.ndarray
    owner_event: np.ndarray  # event owning the segment *after* the point, -1 for none
    event: np.ndarray  # the event whose start or end this point is
    is_start: np.ndarray


def host_points(trace: Trace, starts: np.ndarray, ends: np.ndarray) -> HostPoints:
    ev = trace.events
    tree = call_tree(trace)
    n = len(tree)
    nodes_ev = tree.event
    parent_ev = np.where(tree.parent >= 0, nodes_ev[np.maximum(tree.parent, 0)], -1)
    t = np.empty(2 * n, dtype=np.int64)  # starts, then ends
    begin_us = ev.ts[nodes_ev]
    end_us = begin_us + ev.dur[nodes_ev]
    _ns_into(t[:n], begin_us)
    _ns_into(t[n:], end_us)
    del begin_us, end_us
    # Starts run sorted per thread in tree order; most ranges end in the step they began in.
    pos = np.empty(2 * n, dtype=np.int64)
    pos[:n] = starts_at_or_before(starts, t[:n])
    pos[n:] = ends_at_or_before(starts, t[:n], t[n:], pos[:n])
    step = step_of(t, starts, ends, pos)
    del pos
    keep = np.flatnonzero(step >= 0)
    tid = ev.tid[nodes_ev]
    chain_key = step[keep] * (len(trace.threads) + 1)
    del step
    chain_key += np.r_[tid, tid][keep]  # each point's node's thread
    del tid
    # At one time: ends before starts; ends innermost first, starts outermost first.
    # (keep runs ascending: the starts' points, below n, then the ends')
    tie = keep + n  # starts after every end, in tree order
    first_end = int(np.searchsorted(keep, n))
    np.subtract(2 * n - 1, keep[first_end:], out=tie[first_end:])
    order = _chain_time_order(chain_key, t[keep], tie, 2 * n)
    del tie
    sel = keep[order]
    del keep
    # Per point (starts, then ends, as ``t``): its event, and the event owning what follows.
    owner = np.concatenate([nodes_ev, parent_ev])[sel]
    event = np.concatenate([nodes_ev, nodes_ev])[sel]
    return HostPoints(time=t[sel], chain_key=chain_key[order], owner_event=owner,
                      event=event, is_start=sel < n)


def _chain_time_order(chain_key: np.ndarray, t: np.ndarray, tie: np.ndarray,
                      ties: int) -> np.ndarray:
    """``np.lexsort((tie, t, chain_key))`` for non-negative chain keys and distinct ties below
    ``ties``: one sort of the three in one integer where they fit (most traces), a lexsort
    where they do not."""
    if not len(t):
        return np.lexsort((tie, t, chain_key))
    t_min = int(t.min())
    span = (int(t.max()) - t_min + 1) * ties
    if int(chain_key.min()) < 0 or (int(chain_key.max()) + 1) * span >= 2**63:
        return np.lexsort((tie, t, chain_key))
    key = t - t_min
    key *= ties
    key += tie
    key += chain_key * np.int64(span)
    return np.argsort(key, kind="stable")  # distinct keys: the lexsort's order


class DeviceEvents(msgspec.Struct):
    """Device events of the steps, sorted by (step, device, stream, start)."""

    event: np.ndarray
    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    chain_key: np.ndarray
    launch_point: np.ndarray  # the host point of the launch call's start, -1 for none
    launch_end_point: np.ndarray  # ... and of its end
    issued: np.ndarray  # int64 ns: when the work was handed to the device (launch, or start)
    before: np.ndarray  # int64 ns: end of the stream's previous event, in any step (or UNREACHED)
    #: (order, keys): the events sorted by (step, end), found once by the waits that search it.
    by_end: tuple[np.ndarray, np.ndarray] | None = None


def device_events(trace: Trace, host: HostPoints, starts: np.ndarray, ends: np.ndarray,
                   n_threads: int, links: tuple[np.ndarray, np.ndarray]) -> DeviceEvents:
    """The device events of the steps (``links``: the trace's ``launch_links``)."""
    ev = trace.events
    idx = np.flatnonzero(kind_mask(ev.kind, DEVICE_KINDS) & (ev.device >= 0) & (ev.dur >= 0))
    # Each event's start point at 2 * event, its end point at 2 * event + 1; -1 for none (the
    # two slots at the end: an event -1's).
    point_of = np.full(2 * len(ev) + 2, -1, dtype=np.int64)
    slot = host.event * 2
    slot += ~host.is_start
    point_of[slot] = np.arange(len(slot))
    del slot
    launch_of = np.full(len(ev), -1, dtype=np.int64)
    devices, launches = links
    launch_of[devices] = launches
    launch = launch_of[idx] * 2
    lp, le = point_of[launch], point_of[launch + 1]
    s, e = to_ns(ev.ts[idx]), to_ns(ev.ts[idx] + ev.dur[idx])
    before = _previous_ends(ev.device[idx].astype(np.int64), ev.stream[idx], s, e)
    by_time = step_of(s, starts, ends)
    step = (np.where(lp >= 0, host.chain_key[np.maximum(lp, 0)] // (n_threads + 1), by_time)
            if len(host.chain_key) else by_time)  # a device-only trace has no host points
    keep = step >= 0
    idx, lp, le, s, e, step = idx[keep], lp[keep], le[keep], s[keep], e[keep], step[keep]
    before = before[keep]
    dev, stream = ev.device[idx].astype(np.int64), ev.stream[idx]
    order = np.lexsort((e, s, stream, dev, step))
    idx, lp, le, s, e, step = idx[order], lp[order], le[order], s[order], e[order], step[order]
    before = before[order]
    dev, stream = dev[order], stream[order]
    # Sorted by (step, device, stream): a new chain wherever one of them changes.
    change = np.ones(len(step), dtype=bool)
    change[1:] = (step[1:] != step[:-1]) | (dev[1:] != dev[:-1]) | (stream[1:] != stream[:-1])
    key = np.cumsum(change) - 1
    issued = np.where(lp >= 0, host.time[np.maximum(lp, 0)], s) if len(host.time) else s
    return DeviceEvents(event=idx, step=step, start=s, end=e, chain_key=key,
                        launch_point=lp, launch_end_point=le, issued=issued, before=before)


def _previous_ends(device: np.ndarray, stream: np.ndarray, start: np.ndarray,
                   end: np.ndarray) -> np.ndarray:
    """Per device event, the end of the event before it on its stream (UNREACHED for none)."""
    order = np.lexsort((end, start, stream, device))
    same = np.r_[False, (device[order][1:] == device[order][:-1])
                 & (stream[order][1:] == stream[order][:-1])]
    prev = np.where(same, np.r_[UNREACHED, end[order][:-1]], UNREACHED)
    out = np.empty(len(start), dtype=np.int64)
    out[order] = prev
    return out


def host_windows(trace: Trace, steps: StepWindows) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) ns of each step on the host: its ``ProfilerStep`` range, which the device
    side may run behind; the step windows themselves when steps come from elsewhere."""
    starts, ends = to_ns(steps.starts), to_ns(steps.ends)
    if steps.source != "ProfilerStep":
        return starts, ends
    ev = trace.events
    idx = np.flatnonzero(ev.kind == Kind.STEP)
    numbers = {step_number(ev.names[ev.name[i]]): i for i in idx[::-1].tolist()}
    for k, n in enumerate(steps.numbers.tolist()):
        if n in numbers:
            i = numbers[n]  # one event's end: not the whole column's (``ev.end``)
            starts[k], ends[k] = to_ns(ev.ts[i]), to_ns(ev.ts[i:i + 1] + ev.dur[i:i + 1])[0]
    order_ok = np.all(np.diff(starts) >= 0) if len(starts) > 1 else True
    return (starts, ends) if order_ok else (to_ns(steps.starts), to_ns(steps.ends))
