"""GPU idle time per device and stream: host wait, kernel wait and other, and the longest gaps.

A gap is the time between one device event (kernel, memcpy, memset) and the next on the same
stream (or, for a device's row, with every stream of the device merged), inside the step window.
Each gap is classified as HTA does (docs/idle.md):

* **host wait**: the launch call of the event after the gap started after the gap began, so
  the device waited for the CPU;
* **kernel wait**: otherwise, a gap shorter than ``KERNEL_WAIT_MAX_US`` (launch latency between
  back-to-back events);
* **other**: the rest (waiting on an event, a sync or another stream).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import tabular
from trainprof.analysis.calls.nesting import HostRanges, grouped_running_max
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.intervals import union
from trainprof.analysis.overview.steps import StepWindows, launch_links
from trainprof.analysis.streaming.parts import part_of
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.structs import Derived, Record
from trainprof.trace.model import (
    DEVICE_KINDS,
    FLAG_COMM,
    FLAG_DATALOADER,
    FLAG_OPTIMIZER,
    Kind,
    Trace,
)

#: Gaps shorter than this (µs) between back-to-back device events are "kernel wait": HTA's
#: ``consecutive_kernel_delay`` (30; its docstring says ns, the code compares µs).
KERNEL_WAIT_MAX_US = 30.0
#: How many of the longest device gaps are listed, and host ops shown for each.
LONGEST_GAPS = 10
HOST_OPS_PER_GAP = 3
#: Host ranges that say what the CPU was doing during a gap: ops and launch calls, and the
#: annotations that name a role (data loading, optimizer, communication). Other annotations
#: (``## forward ##``) would only hide the ops inside them.
_HOST_KINDS = (Kind.CPU_OP, Kind.RUNTIME, Kind.DRIVER)
_ROLE_FLAGS = FLAG_DATALOADER | FLAG_OPTIMIZER | FLAG_COMM
CATEGORIES = ("host_wait", "kernel_wait", "other")


class IdleRow(Record):
    """Idle time of one device (``stream`` None: all its streams merged) or one stream, in µs."""

    json_derived = (Derived("idle_us", "busy_us"), Derived("idle_pct_of_span", "idle_us"),
                    Derived("host_wait_pct_of_idle", "other_us"),
                    Derived("kernel_wait_pct_of_idle", "other_us"),
                    Derived("other_pct_of_idle", "other_us"))

    device: int
    stream: int | None
    events: int
    gaps: int
    span_us: float  # first event start to last event end, inside the window
    busy_us: float
    host_wait_us: float
    kernel_wait_us: float
    other_us: float

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    @property
    def idle_pct_of_span(self) -> float:
        return self.idle_us / self.span_us * 100.0 if self.span_us > 0 else 0.0

    @property
    def host_wait_pct_of_idle(self) -> float:
        return self._of_idle(self.host_wait_us)

    @property
    def kernel_wait_pct_of_idle(self) -> float:
        return self._of_idle(self.kernel_wait_us)

    @property
    def other_pct_of_idle(self) -> float:
        return self._of_idle(self.other_us)

    def _of_idle(self, us: float) -> float:
        idle = self.idle_us
        return us / idle * 100.0 if idle > 0 else 0.0



class HostActivity(Record):
    """A top-level host range overlapping a gap."""

    name: str
    thread: str
    overlap_us: float


class IdleGap(Record):
    device: int
    start_ms: float  # from the start of the step window
    duration_us: float
    category: str
    step: int | None
    #: Time of the gap during which no recorded host range ran (Python, or untraced threads).
    no_host_op_us: float = 0.0
    host: list[HostActivity] = field(default_factory=list)


class IdleTime(Record):
    window_ms: float
    kernel_wait_max_us: float
    devices: list[IdleRow]
    streams: list[IdleRow]
    longest: list[IdleGap] = field(name="longest_gaps")

    def to_pandas(self) -> Any:
        """One row per device and per stream (``stream`` None for a device's merged row)."""
        return data_frame([r.to_dict() for r in (*self.devices, *self.streams)])


class _Gaps(msgspec.Struct):
    """Per device event (sorted by group, start): the gap before it and its category."""

    group: np.ndarray
    ts: np.ndarray
    gap: np.ndarray  # 0 where no idle precedes the event
    category: np.ndarray  # index into CATEGORIES, -1 for no gap
    order: np.ndarray  # the sorted events' positions in the input
    prev: np.ndarray  # the latest end before each event in its group (nan: first)


class _First(msgspec.Struct):
    """A group's first event in a window: its gap depends on what ran before the window."""

    ts: float
    launch_ts: float  # nan: no launch recorded
    prev: float  # the latest end before it that the window sees (-inf: none)
    pos: int  # its position in the window's (group, start) order


class _Group(msgspec.Struct):
    """What a window knows of one device (stream None) or stream: its events from the second
    on are final; the first waits for the end of the work before the window."""

    events: int
    first_ts: float
    last_end: float  # latest end of its events (cut at the span's end once known)
    sums: list[float]  # per category, gaps of its events from the second on
    gaps: int
    first: _First
    second_prev: float  # the end the second event's gap was measured from (inf: no second)
    reach: float  # the latest end the window sees in the group, margin included


class _HostPiece(msgspec.Struct):
    """Host activity in part of a gap: top-level ranges (key, name, thread, overlap) and how
    long any of them covered it."""

    ranges: list[tuple[tuple[int, float, float], str, str, float]]
    covered: float


class _Candidate(msgspec.Struct):
    """One of a window's longest device gaps, with the host ranges during it."""

    device: int
    start: float
    end: float
    category: int
    host: _HostPiece
    order: tuple[int, int]  # (window, position): ties keep the whole trace's order


class _Part(msgspec.Struct):
    devices: dict[int, _Group]
    streams: dict[tuple[int, int], _Group]
    longest: list[_Candidate]
    #: Per device, its first event's gap measured from what the window sees, and the host
    #: activity from the part's start to that event and after the device's last work.
    first_gap: dict[int, _Candidate]
    head: dict[int, _HostPiece]
    tail: dict[int, tuple[float, _HostPiece]]  # (from where, activity to the part's end)
    whole: _HostPiece  # the activity over the whole part (a device the window never sees)
    start: float
    end: float
    index: int


def _partial(window: Window) -> _Part:
    trace, part = window.trace, part_of(window)
    start, end = part.start, part.end
    ev = trace.events
    rel = ev.of_kind(*DEVICE_KINDS) & (ev.device >= 0) & (ev.ts < end)
    if part.first:
        rel &= event_ends(ev) > start
    idx = np.flatnonzero(rel)
    ts = np.maximum(ev.ts[idx], start)
    te = np.minimum(event_ends(ev)[idx], end) if part.last else event_ends(ev)[idx]
    own = part.owns(ev.ts[idx], event_ends(ev)[idx])
    launch_ts = np.full(len(ev), np.nan)
    dev, launch = launch_links(trace)
    launch_ts[dev] = ev.ts[launch]
    lts = launch_ts[idx]
    device = ev.device[idx].astype(np.int64)
    stream = ev.stream[idx].astype(np.int64)
    devices, device_gaps = _groups(device, ts, te, lts, own)
    first, pair_of = tabular.group_ids(device, stream)
    by_pair, _ = _groups(pair_of, ts, te, lts, own)
    streams = {(int(device[first[k]]), int(stream[first[k]])): g for k, g in by_pair.items()}
    g = device_gaps
    ranges = _top_host_ranges(trace)
    longest = []
    has = np.flatnonzero((g.category >= 0) & g.own & ~g.first)
    for i in has[np.argsort(-g.gap[has], kind="stable")[:LONGEST_GAPS]].tolist():
        g_end = float(g.ts[i])
        g_start = g_end - float(g.gap[i])
        longest.append(_Candidate(int(g.group[i]), g_start, g_end, int(g.category[i]),
                                  _host_piece(ranges, g_start, g_end), (window.index, i)))
    first_gap, head, tail = {}, {}, {}
    for d, grp in devices.items():
        f = grp.first
        if np.isfinite(f.prev) and f.ts > f.prev:
            first_gap[d] = _Candidate(d, f.prev, f.ts, -1, _host_piece(ranges, f.prev, f.ts),
                                      (window.index, f.pos))
        # Pieces of gaps that run through several windows: the host activity before the
        # device's first event (not in the first window) and after its last (not in the last).
        if not part.first:
            head[d] = _host_piece(ranges, start, f.ts, crossing=True)
        if not part.last:
            since = max(grp.reach, start)
            tail[d] = (since, _host_piece(ranges, since, end, crossing=True))
    whole = _HostPiece([], 0.0) if part.last else _host_piece(ranges, start, end, crossing=True)
    return _Part(devices, streams, longest, first_gap, head, tail, whole, start, end,
                 window.index)


class _Sorted(_Gaps):
    """``_Gaps`` with, per sorted event, whether the window owns it and whether it is its
    group's first owned event."""

    own: np.ndarray
    first: np.ndarray


def _groups(group: np.ndarray, ts: np.ndarray, te: np.ndarray, lts: np.ndarray,
            own: np.ndarray) -> tuple[dict[int, _Group], _Sorted]:
    """Per group key, what the window knows of it (groups it owns events of)."""
    g = _gaps(group, ts, te, lts)
    own_s, te_s, lts_s = own[g.order], te[g.order], lts[g.order]
    first = np.zeros(len(own_s), dtype=bool)
    out: dict[int, _Group] = {}
    bounds = np.flatnonzero(g.group[1:] != g.group[:-1]) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(own_s)], strict=True):
        mine = lo + np.flatnonzero(own_s[lo:hi])
        if not len(mine):
            continue
        f, rest = int(mine[0]), mine[1:]
        first[f] = True
        cat = g.category[rest]
        prev = float(g.prev[f])
        out[int(g.group[lo])] = _Group(
            events=len(mine), first_ts=float(g.ts[f]), last_end=float(te_s[mine].max()),
            sums=[float(g.gap[rest][cat == c].sum()) for c in range(len(CATEGORIES))],
            gaps=int((cat >= 0).sum()),
            first=_First(float(g.ts[f]), float(lts_s[f]), prev if np.isfinite(prev) else -np.inf,
                         f),
            second_prev=float(g.prev[rest[0]]) if len(rest) else np.inf,
            reach=float(te_s[lo:hi].max()),
        )
    return out, _Sorted(g.group, g.ts, g.gap, g.category, g.order, g.prev, own_s, first)


class _TopRanges(msgspec.Struct):
    """The top-level host ranges of a window that say what the CPU was doing."""

    trace: Trace
    ts: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    index: np.ndarray  # event index

    def name(self, i: int) -> str:
        ev = self.trace.events
        return ev.names[ev.name[self.index[i]]]

    def label(self, i: int) -> str:
        return _thread_label(self.trace, int(self.thread[i]))


def _top_host_ranges(trace: Trace) -> _TopRanges:
    ev = trace.events
    roles = (ev.kind == Kind.USER_ANNOTATION) & ((ev.flags & _ROLE_FLAGS) != 0)
    host = np.flatnonzero(ev.of_kind(*_HOST_KINDS) | roles)
    ranges = HostRanges.of(ev.ts[host], event_ends(ev)[host], ev.tid[host], host)
    top = ranges.top_level()
    return _TopRanges(trace, ranges.ts[top], ranges.end[top], ranges.thread[top],
                      ranges.index[top])


def _host_piece(r: _TopRanges, g_start: float, g_end: float,
                crossing: bool = False) -> _HostPiece:
    """The top-level host ranges overlapping ``[g_start, g_end)``: the ``HOST_OPS_PER_GAP``
    that overlap it most (and with ``crossing``, every one reaching past either end, so that
    pieces of one gap can be joined), and how long any of them covered it."""
    if g_end <= g_start:
        return _HostPiece([], 0.0)
    overlap = np.minimum(r.end, g_end) - np.maximum(r.ts, g_start)
    hit = np.flatnonzero(overlap > 0)
    covered = union(np.maximum(r.ts[hit], g_start), np.minimum(r.end[hit], g_end)).total()
    keep = hit[np.argsort(-overlap[hit], kind="stable")[:HOST_OPS_PER_GAP]]
    if crossing:
        over = hit[(r.ts[hit] < g_start) | (r.end[hit] > g_end)]
        keep = np.concatenate([keep, over[~np.isin(over, keep)]])
    # Keyed as HostRanges sorts them: (thread, start, longest first).
    return _HostPiece([((int(r.thread[h]), float(r.ts[h]), float(r.ts[h] - r.end[h])),
                        r.name(h), r.label(h), float(overlap[h])) for h in keep.tolist()],
                      covered)


def _combine(parts: list[_Part], steps: StepWindows) -> IdleTime:
    start, end = steps.span
    if end <= start or not any(p.devices for p in parts):
        return IdleTime(max(end - start, 0.0) / 1000.0, KERNEL_WAIT_MAX_US, [], [], [])
    devices, firsts = _joined([p.devices for p in parts], end)
    streams, _ = _joined([p.streams for p in parts], end)
    candidates = [c for p in parts for c in p.longest]
    for k, d, gap, category, spans_windows in firsts:
        part = parts[k]
        if not spans_windows:
            c = part.first_gap[d]
            candidates.append(_Candidate(d, c.start, c.end, category, c.host, c.order))
            continue
        # The device was idle since before the window's margin: join the host activity of
        # every window the gap runs through.
        g_end = part.devices[d].first.ts
        g_start = g_end - gap
        pieces = [part.head[d]]
        for q in parts[:k]:
            if q.end <= g_start:
                continue
            pieces.append(q.whole if g_start <= q.start else q.tail.get(d, (q.start, q.whole))[1])
        candidates.append(_Candidate(d, g_start, g_end, category, _joined_pieces(pieces),
                                     (k, part.devices[d].first.pos)))
    candidates.sort(key=lambda c: (-(c.end - c.start), c.device, c.end, c.order))
    longest = []
    for c in candidates[:LONGEST_GAPS]:
        step = np.searchsorted(steps.starts, c.start, side="right") - 1
        longest.append(IdleGap(
            device=c.device, start_ms=(c.start - start) / 1000.0, duration_us=c.end - c.start,
            category=CATEGORIES[c.category],
            step=int(steps.numbers[step]) if step >= 0 else None,
            no_host_op_us=(c.end - c.start) - c.host.covered,
            host=[HostActivity(name, label, overlap) for _, name, label, overlap in
                  c.host.ranges[:HOST_OPS_PER_GAP]],
        ))
    return IdleTime(
        window_ms=(end - start) / 1000.0,
        kernel_wait_max_us=KERNEL_WAIT_MAX_US,
        devices=[_row(d, None, g) for d, g in sorted(devices.items())],
        streams=[_row(k[0], k[1], g) for k, g in sorted(streams.items())],
        longest=longest,
    )


_Key = TypeVar("_Key", int, tuple[int, int])


def _joined(parts: list[dict[_Key, _Group]], end: float
            ) -> tuple[dict[_Key, _Group], list[tuple[int, _Key, float, int, bool]]]:
    """Each group's figures over every window, and per (window, device) whose first event had
    a gap: (window, key, gap, category, whether the gap began before the window's margin)."""
    out: dict[_Key, _Group] = {}
    reach: dict[_Key, float] = {}
    firsts = []
    for k, groups in enumerate(parts):
        for key, g in groups.items():
            before = reach.get(key, -np.inf)
            f = g.first
            # The windows before own every event the margin holds: their reach is the end the
            # first event's gap starts from (the margin may also hold a zero-length event at
            # the span's start, which is not in the span).
            prev = before
            gap = max(f.ts - prev, 0.0) if prev > -np.inf else 0.0
            sums = list(g.sums)
            gaps = g.gaps
            if gap > 0:
                category = 0 if f.launch_ts > prev else (1 if gap < KERNEL_WAIT_MAX_US else 2)
                sums[category] += gap
                gaps += 1
                firsts.append((k, key, gap, category, before != f.prev))
            acc = out.get(key)
            if acc is None:
                out[key] = _Group(g.events, g.first_ts, g.last_end, sums, gaps, f,
                                  g.second_prev, g.reach)
            else:
                acc.events += g.events
                acc.last_end = max(acc.last_end, g.last_end)
                acc.sums = [a + b for a, b in zip(acc.sums, sums, strict=True)]
                acc.gaps += gaps
            reach[key] = max(before, g.last_end)
    for g in out.values():
        g.last_end = min(g.last_end, end)
    return out, firsts


def _joined_pieces(pieces: list[_HostPiece]) -> _HostPiece:
    """One gap's host activity from its pieces in several windows (overlaps of a range seen in
    several pieces add up)."""
    total: dict[tuple[int, float, float], list] = {}
    for piece in pieces:
        for key, name, label, overlap in piece.ranges:
            entry = total.setdefault(key, [name, label, 0.0])
            entry[2] += overlap
    ranked = sorted(total.items(), key=lambda kv: (-kv[1][2], kv[0]))
    return _HostPiece([(key, name, label, overlap) for key, (name, label, overlap) in ranked],
                      sum(p.covered for p in pieces))


def _row(device: int, stream: int | None, g: _Group) -> IdleRow:
    span = g.last_end - g.first_ts
    idle = g.sums[0] + g.sums[1] + g.sums[2]
    return IdleRow(device=device, stream=stream, events=g.events, span_us=span,
                   busy_us=span - idle, host_wait_us=g.sums[0], kernel_wait_us=g.sums[1],
                   other_us=g.sums[2], gaps=g.gaps)


#: Idle-time breakdown of every device and stream (empty without device events), computed
#: window by window (analysis/streaming/windows.py): ``idle_time(trace, steps)`` for a whole trace.
idle_time: WindowedSection[_Part, IdleTime] = WindowedSection(_partial, _combine, cost=0.53)


def _gaps(group: np.ndarray, ts: np.ndarray, te: np.ndarray, lts: np.ndarray) -> _Gaps:
    order = np.lexsort((ts, group))
    group, ts, te, lts = group[order], ts[order], te[order], lts[order]
    reach = grouped_running_max(te, group)  # the latest end so far within each group
    prev = np.full(len(ts), np.nan)
    same = np.zeros(len(ts), dtype=bool)
    same[1:] = group[1:] == group[:-1]
    prev[1:][same[1:]] = reach[:-1][same[1:]]
    gap = np.where(same, np.maximum(ts - prev, 0.0), 0.0)
    has = gap > 0
    host_wait = has & (lts > prev)  # nan launch times compare False
    kernel_wait = has & ~host_wait & (gap < KERNEL_WAIT_MAX_US)
    category = np.full(len(ts), -1, dtype=np.int8)
    category[has] = 2
    category[kernel_wait] = 1
    category[host_wait] = 0
    return _Gaps(group, ts, gap, category, order, prev)


def _thread_label(trace: Trace, thread: int) -> str:
    pid, tid = trace.threads[thread]
    return f"{pid}/{tid}"
