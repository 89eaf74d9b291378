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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis import tabular
from trainprof.analysis.frames import data_frame
from trainprof.analysis.intervals import union
from trainprof.analysis.nesting import HostRanges, grouped_running_max
from trainprof.analysis.steps import StepWindows, launch_links
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


@dataclass
class IdleRow:
    """Idle time of one device (``stream`` None: all its streams merged) or one stream, in µs."""

    device: int
    stream: int | None
    events: int
    span_us: float  # first event start to last event end, inside the window
    busy_us: float
    host_wait_us: float
    kernel_wait_us: float
    other_us: float
    gaps: int

    @property
    def idle_us(self) -> float:
        return self.host_wait_us + self.kernel_wait_us + self.other_us

    def to_dict(self) -> dict[str, Any]:
        idle = self.idle_us
        share = {c: (getattr(self, f"{c}_us") / idle * 100.0 if idle > 0 else 0.0)
                 for c in CATEGORIES}
        return {
            "device": self.device, "stream": self.stream, "events": self.events,
            "gaps": self.gaps, "span_us": self.span_us, "busy_us": self.busy_us,
            "idle_us": idle,
            "idle_pct_of_span": idle / self.span_us * 100.0 if self.span_us > 0 else 0.0,
            "host_wait_us": self.host_wait_us, "kernel_wait_us": self.kernel_wait_us,
            "other_us": self.other_us,
            **{f"{c}_pct_of_idle": v for c, v in share.items()},
        }


@dataclass
class HostActivity:
    """A top-level host range overlapping a gap."""

    name: str
    thread: str
    overlap_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "thread": self.thread, "overlap_us": self.overlap_us}


@dataclass
class IdleGap:
    device: int
    start_ms: float  # from the start of the step window
    duration_us: float
    category: str
    step: int | None
    #: Time of the gap during which no recorded host range ran (Python, or untraced threads).
    no_host_op_us: float = 0.0
    host: list[HostActivity] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "start_ms": self.start_ms,
                "duration_us": self.duration_us, "category": self.category, "step": self.step,
                "no_host_op_us": self.no_host_op_us, "host": [h.to_dict() for h in self.host]}


@dataclass
class IdleTime:
    window_ms: float
    kernel_wait_max_us: float
    devices: list[IdleRow]
    streams: list[IdleRow]
    longest: list[IdleGap]

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_ms": self.window_ms,
            "kernel_wait_max_us": self.kernel_wait_max_us,
            "devices": [r.to_dict() for r in self.devices],
            "streams": [r.to_dict() for r in self.streams],
            "longest_gaps": [g.to_dict() for g in self.longest],
        }

    def to_pandas(self) -> Any:
        """One row per device and per stream (``stream`` None for a device's merged row)."""
        return data_frame([r.to_dict() for r in (*self.devices, *self.streams)])


@dataclass
class _Gaps:
    """Per device event (sorted by group, start): the gap before it and its category."""

    group: np.ndarray
    ts: np.ndarray
    gap: np.ndarray  # 0 where no idle precedes the event
    category: np.ndarray  # index into CATEGORIES, -1 for no gap


def idle_time(trace: Trace, steps: StepWindows) -> IdleTime:
    """Idle-time breakdown of every device and stream (empty without device events)."""
    start, end = steps.span
    ev = trace.events
    mask = ev.of_kind(*DEVICE_KINDS) & (ev.device >= 0) & (ev.ts < end) & (ev.end > start)
    idx = np.flatnonzero(mask)
    if not len(idx) or end <= start:
        return IdleTime(max(end - start, 0.0) / 1000.0, KERNEL_WAIT_MAX_US, [], [], [])
    ts = np.maximum(ev.ts[idx], start)
    te = np.minimum(ev.end[idx], end)
    launch_ts = np.full(len(ev), np.nan)
    dev, launch = launch_links(trace)
    launch_ts[dev] = ev.ts[launch]
    lts = launch_ts[idx]
    device = ev.device[idx].astype(np.int64)
    stream = ev.stream[idx]

    devices = _rows(device, None, ts, te, lts)
    first, stream_group = tabular.group_ids(device, stream)
    streams = _rows(stream_group, np.stack([device[first], stream[first]]), ts, te, lts)
    gaps = _gaps(device, ts, te, lts)
    return IdleTime(
        window_ms=(end - start) / 1000.0,
        kernel_wait_max_us=KERNEL_WAIT_MAX_US,
        devices=devices,
        streams=streams,
        longest=_longest(trace, steps, gaps, start),
    )


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
    return _Gaps(group, ts, gap, category)


def _rows(group: np.ndarray, pairs: np.ndarray | None, ts: np.ndarray, te: np.ndarray,
          lts: np.ndarray) -> list[IdleRow]:
    g = _gaps(group, ts, te, lts)
    keys, inverse = np.unique(g.group, return_inverse=True)
    n = len(keys)
    sums = [np.bincount(inverse, weights=np.where(g.category == c, g.gap, 0.0), minlength=n)
            for c in range(len(CATEGORIES))]
    counts = np.bincount(inverse, minlength=n)
    gap_counts = np.bincount(inverse, weights=(g.category >= 0).astype(float), minlength=n)
    key_of = np.unique(group, return_inverse=True)[1].ravel()
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, key_of, ts)
    np.maximum.at(last, key_of, te)
    rows = []
    for i, key in enumerate(keys):
        span = float(last[i] - first[i])
        idle = float(sums[0][i] + sums[1][i] + sums[2][i])
        device, stream = (int(key), None) if pairs is None else (int(pairs[0, key]),
                                                                 int(pairs[1, key]))
        rows.append(IdleRow(
            device=device, stream=stream, events=int(counts[i]), span_us=span,
            busy_us=span - idle, host_wait_us=float(sums[0][i]),
            kernel_wait_us=float(sums[1][i]), other_us=float(sums[2][i]),
            gaps=int(gap_counts[i]),
        ))
    return rows


def _longest(trace: Trace, steps: StepWindows, g: _Gaps, window_start: float) -> list[IdleGap]:
    """The longest device gaps, each with the top-level host ranges that overlap it."""
    has = np.flatnonzero(g.category >= 0)
    if not len(has):
        return []
    top = has[np.argsort(-g.gap[has], kind="stable")[:LONGEST_GAPS]]
    ev = trace.events
    roles = (ev.kind == Kind.USER_ANNOTATION) & ((ev.flags & _ROLE_FLAGS) != 0)
    host = np.flatnonzero(ev.of_kind(*_HOST_KINDS) | roles)
    ranges = HostRanges.of(ev.ts[host], ev.end[host], ev.tid[host], host)
    top_level = ranges.top_level()
    r_ts, r_end = ranges.ts[top_level], ranges.end[top_level]
    r_idx, r_thread = ranges.index[top_level], ranges.thread[top_level]
    out = []
    for i in top:
        g_end = float(g.ts[i])
        g_start = g_end - float(g.gap[i])
        overlap = np.minimum(r_end, g_end) - np.maximum(r_ts, g_start)
        hit = np.flatnonzero(overlap > 0)
        covered = union(np.maximum(r_ts[hit], g_start), np.minimum(r_end[hit], g_end)).total()
        hit = hit[np.argsort(-overlap[hit], kind="stable")[:HOST_OPS_PER_GAP]]
        step = np.searchsorted(steps.starts, g_start, side="right") - 1
        out.append(IdleGap(
            device=int(g.group[i]),
            start_ms=(g_start - window_start) / 1000.0,
            duration_us=float(g.gap[i]),
            category=CATEGORIES[g.category[i]],
            step=int(steps.numbers[step]) if step >= 0 else None,
            no_host_op_us=float(g.gap[i]) - covered,
            host=[HostActivity(ev.names[ev.name[r_idx[h]]], _thread_label(trace, r_thread[h]),
                               float(overlap[h])) for h in hit],
        ))
    return out


def _thread_label(trace: Trace, thread: int) -> str:
    pid, tid = trace.threads[thread]
    return f"{pid}/{tid}"
