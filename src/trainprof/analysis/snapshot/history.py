"""A snapshot's allocator history (`device_traces`): live and reserved bytes over time, the
allocations of each step, and whether memory grows from step to step.

Live bytes rise at `alloc` and fall at `free_completed` (when the block is really reusable);
reserved bytes rise at `segment_alloc`/`segment_map` and fall at `segment_free`/`segment_unmap`.
The level before the first event is what the snapshot's blocks hold at its end minus the net of
the history (the history runs up to the snapshot). Steps come from the `ProfilerStep#N`
annotations that torch records in `external_annotations` while the profiler runs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from msgspec import field

from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.sections.memory_series import downsample, growth
from trainprof.structs import Record

#: Points kept of each timeline for drawing (each bucket's min and max, so peaks survive).
TIMELINE_POINTS = 600
_LIVE = {"alloc": 1, "free_completed": -1}
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


class StepAllocations(Record):
    """What one step asked of the allocator, and what was live when it ended."""

    step: int
    allocations: int
    bytes: int
    live_at_end: float


class LiveTimeline(Record):
    """Live and reserved bytes at the points kept of a history, down-sampled for drawing."""

    ms: list[float] = field(default_factory=list)  # from the first event (or event numbers)
    live: list[float] = field(default_factory=list)
    reserved: list[float] = field(default_factory=list)


class History(Record):
    """One device's history: a down-sampled timeline, the peak, steps and growth."""

    device: int
    events: int
    has_time: bool
    timeline: LiveTimeline = field(default_factory=LiveTimeline)
    peak_live: float | None = None
    peak_ms: float | None = None
    peak_entry: int | None = None  # index of the history entry that reached the peak
    peak_step: int | None = None  # the ProfilerStep#N the peak fell in, when known
    steps: list[StepAllocations] = field(default_factory=list)
    growth_mb_per_step: float | None = None
    rising_share: float | None = None
    leak_suspected: bool = False
    notes: list[str] = field(default_factory=list)


def step_windows(annotations: Any) -> StepWindows | None:
    """`ProfilerStep#N` windows (µs) from `external_annotations`; None without complete ones."""
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for entry in annotations if isinstance(annotations, list) else []:
        match = _STEP.match(str(entry.get("name", ""))) if isinstance(entry, dict) else None
        if match is None or not isinstance(entry.get("time_us"), int | float):
            continue
        stage = (starts if entry.get("stage") == "START" else
                 ends if entry.get("stage") == "END" else None)
        if stage is not None:
            stage.setdefault(int(match.group(1)), float(entry["time_us"]))
    numbers = sorted(n for n in starts if n in ends and ends[n] >= starts[n])
    if not numbers:
        return None
    return StepWindows(np.array(numbers, dtype=np.int64), np.array([starts[n] for n in numbers]),
                       np.array([ends[n] for n in numbers]), "ProfilerStep")


def history(device: int, entries: list[dict[str, Any]], live_at_end: int, reserved_at_end: int,
            steps: StepWindows | None) -> History:
    """The history of one device, its level before the first event rebuilt from the end state."""
    n = len(entries)
    times = [e.get("time_us") for e in entries]
    has_time = n > 0 and all(isinstance(t, int | float) for t in times)
    ts = np.array(times, dtype=np.float64) if has_time else np.arange(n, dtype=np.float64)
    size = np.array([int(e.get("size", 0) or 0) for e in entries], dtype=np.float64)
    actions: list[Any] = [e.get("action") for e in entries]
    live = np.cumsum(size * np.array([_LIVE.get(a, 0) for a in actions], dtype=np.float64))
    reserved = np.cumsum(size * np.array([_RESERVED.get(a, 0) for a in actions], dtype=np.float64))
    out = History(device, n, has_time)
    if n == 0:
        return out
    live_start = live_at_end - live[-1]
    reserved_start = reserved_at_end - reserved[-1]
    if live_start < 0:
        out.notes.append("the history starts mid-way (its oldest entries were dropped): the "
                         "level before it is unknown, so the timeline starts at 0")
        live_start = -min(float(live.min()), 0.0)
    live += live_start
    reserved += max(reserved_start, float(-reserved.min()), 0.0)
    keep = downsample(live, reserved, TIMELINE_POINTS)
    origin = ts[0]
    scale = 1e3 if has_time else 1.0
    out.timeline = LiveTimeline([float(x) for x in (ts[keep] - origin) / scale],
                                [float(x) for x in live[keep]], [float(x) for x in reserved[keep]])
    top = int(np.argmax(live))
    out.peak_live, out.peak_ms = float(live[top]), float((ts[top] - origin) / scale)
    out.peak_entry = top
    if steps is not None and has_time:
        inside = (steps.starts <= ts[top]) & (ts[top] <= steps.ends)
        out.peak_step = int(steps.numbers[inside][0]) if inside.any() else None
        _add_steps(out, ts, size, actions, live, live_start, steps)
    elif steps is None:
        out.notes.append("no ProfilerStep annotations: allocations per step are unknown")
    return out


def _add_steps(out: History, ts: np.ndarray, size: np.ndarray, actions: list[Any],
               live: np.ndarray, live_start: float, steps: StepWindows) -> None:
    is_alloc = np.array([a == "alloc" for a in actions])
    first = np.searchsorted(ts, steps.starts, side="left")
    last = np.searchsorted(ts, steps.ends, side="right")
    bytes_before = np.concatenate([[0.0], np.cumsum(np.where(is_alloc, size, 0.0))])
    count_before = np.concatenate([[0], np.cumsum(is_alloc)])
    ends, slope, rising, leak = growth(ts, live, live_start, steps)
    out.steps = [StepAllocations(int(n), int(count_before[b] - count_before[a]),
                                 int(bytes_before[b] - bytes_before[a]), end)
                 for n, a, b, (_, end) in zip(steps.numbers, first, last, ends, strict=True)]
    out.growth_mb_per_step, out.rising_share, out.leak_suspected = slope, rising, leak
