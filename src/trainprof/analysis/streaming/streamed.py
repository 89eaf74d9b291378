"""The analysis of one trace too large for memory: spilled to disk, analysed window by window.

``analyze_streamed`` reads the file once into a spill (trace/spill.py), finds the steps from the
step markers kept in memory (re-timed to the device window by window, as ``find_steps`` does
on the whole trace), then assembles one window of consecutive steps at a time and hands it to
every section (each a ``WindowedSection``, analysis/streaming/windows.py). The number of steps
per window is the largest that keeps the biggest window within the memory budget.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from trainprof.analysis.critical_path.windowed import PlannedSection
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.overview.rank import OVERVIEW_SECTIONS, overview
from trainprof.analysis.overview.steps import (
    TIME_WINDOWS,
    DeviceSpans,
    StepWindows,
    _optimizer_steps,
    _profiler_steps,
    device_spans,
    retime,
)
from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.section_results import RankSections
from trainprof.analysis.sections.registry import sections_for
from trainprof.analysis.streaming.windows import (
    MARGIN_STEPS,
    Window,
    WindowedSection,
    region_of,
    step_range,
    window_bounds,
)
from trainprof.trace.model import HOST_KINDS, Kind, Trace
from trainprof.trace.spill import SpilledTrace, check_disk, spill_file

#: Memory one complete event of a window takes while it is analysed: its columns (about 100
#: bytes) and the analyses' temporaries. Measured on the 1 GB trace (docs/performance.md).
WINDOW_BYTES_PER_EVENT = 600
#: A trace without steps streams in at most this many equal time windows.
MAX_TIME_WINDOWS = 4096
#: What streaming needs besides the window: the interpreter, numpy, the interned tables.
STREAM_BASE_BYTES = 300 * 2**20


def analyze_streamed(path: str | os.PathLike[str], max_memory: int | None = None,
                     steps_per_window: int | None = None, folder: str | Path | None = None,
                     options: AnalyzeOptions | None = None) -> RankAnalysis:
    """The ``RankAnalysis`` of the trace at ``path``, computed window by window in about
    ``max_memory`` bytes (default: memory.default_budget()); ``steps_per_window`` forces the
    window size; ``folder`` holds the spill (default: the system's temporary folder);
    ``options``: the analysis's (None: the defaults), which the sections are built from.

    Raises ``TraceError`` like ``load_file``, and when the disk cannot hold the spill."""
    from trainprof.analysis.streaming.memory_budget import default_budget, json_estimate

    path = Path(path)
    budget = default_budget() if max_memory is None else max_memory
    check_disk(folder, json_estimate(path))
    with spill_file(path, folder) as spilled:
        return analyze_spilled(spilled, budget, steps_per_window, options)


def analyze_export_streamed(path: str | os.PathLike[str], max_memory: int | None = None,
                            step_marker: re.Pattern[str] | None = None,
                            steps_per_window: int | None = None,
                            folder: str | Path | None = None,
                            piece_rows: int | None = None,
                            options: AnalyzeOptions | None = None) -> list[RankAnalysis]:
    """The ``RankAnalysis`` of each rank of an Nsight Systems export (trace/nsys/spill.py),
    computed as ``analyze_streamed`` computes a JSON trace's, one rank after the other;
    ``piece_rows``: rows of a table read at a time (default ``PIECE_ROWS``)."""
    from trainprof.analysis.streaming.memory_budget import default_budget
    from trainprof.trace.nsys.detect import sqlite_of
    from trainprof.trace.nsys.spill import (
        DISK_BYTES_PER_EXPORT_BYTE,
        PIECE_ROWS,
        spilled_export,
    )

    path = sqlite_of(Path(path))
    budget = default_budget() if max_memory is None else max_memory
    check_disk(folder, path.stat().st_size, DISK_BYTES_PER_EXPORT_BYTE)
    with spilled_export(path, folder, step_marker, piece_rows or PIECE_ROWS) as ranks:
        return [analyze_spilled(spilled, budget, steps_per_window, options)
                for spilled in ranks]


def analyze_spilled(spilled: SpilledTrace, budget: int, steps_per_window: int | None = None,
                    options: AnalyzeOptions | None = None) -> RankAnalysis:
    """The analysis of a spilled trace, in windows of steps that fit ``budget`` bytes, with
    the sections these options ask for (None: the defaults)."""
    recorded = recorded_steps(spilled)
    if recorded.source == "whole trace":
        recorded = time_windows(spilled, recorded, budget)
    per = steps_per_window or fitting_steps(spilled, recorded, budget)
    steps = streamed_steps(spilled, recorded, per)
    per = steps_per_window or fitting_steps(spilled, steps, budget)
    return _analysis(spilled, steps, per, options)


def _analysis(spilled: SpilledTrace, steps: StepWindows, per: int,
              options: AnalyzeOptions | None = None) -> RankAnalysis:
    windowed = dict(sections_for(options))
    sections: dict[str, WindowedSection] = {**OVERVIEW_SECTIONS, **windowed}
    # A planned section (the critical path) surveys every window, then reads again only the
    # time ranges its plan needs, so that it never holds more than those.
    planned = {name: s for name, s in sections.items() if isinstance(s, PlannedSection)}
    parts: dict[str, list[Any]] = {name: [] for name in sections}
    count = 0
    for window in stream_windows(spilled, steps, per, margin_steps(spilled, steps)):
        count += 1
        for name, section in sections.items():
            step = planned[name].survey if name in planned else section.partial
            parts[name].append(step(window))
    results = {name: section.combine(parts.pop(name), steps)
               for name, section in sections.items() if name not in planned}
    for name, section in planned.items():
        results[name] = section.from_ranges(parts.pop(name), steps, read=spilled.window)
    by_section = {v: k for k, v in OVERVIEW_SECTIONS.items()}
    note = (f"Streamed (trace larger than the memory budget): {count} window(s) of up to "
            f"{per} step(s).")
    if steps.source == TIME_WINDOWS:
        note += (f" Without steps the trace is cut into {len(steps)} time windows of "
                 f"{float(steps.durations[0]) / 1000:.1f} ms, each reported as a step.")
    head = spilled.window(math.inf, math.inf)
    head.__dict__["devices"] = spilled.devices
    return overview(head, steps, lambda section: results[by_section[section]],
                    RankSections(**{name: results[name] for name in windowed}), notes=[note])


def recorded_steps(spilled: SpilledTrace) -> StepWindows:
    """The steps as recorded (before re-timing), from the markers kept in memory; the whole
    trace as one step when there are none (as ``find_steps``)."""
    markers = _marker_trace(spilled)
    found = _profiler_steps(markers) or _optimizer_steps(markers)
    if found is not None:
        numbers, starts, ends, source = found
        return StepWindows(numbers=numbers, starts=starts, ends=ends, source=source)
    start, end = _whole_span(spilled)
    return StepWindows(numbers=np.array([0]), starts=np.array([start]), ends=np.array([end]),
                       source="whole trace",
                       notes=["No ProfilerStep or optimizer-step events: the whole trace is "
                              "one window."])


def time_windows(spilled: SpilledTrace, whole: StepWindows, budget: int) -> StepWindows:
    """A trace without steps cut into equal time windows, as few as keep a window (with its
    neighbours, the margin) within ``budget``; ``whole`` itself when the whole trace fits."""
    allowed = max(budget - STREAM_BASE_BYTES, 0) // WINDOW_BYTES_PER_EVENT
    start, end = float(whole.starts[0]), float(whole.ends[0])
    count = 1
    while count < MAX_TIME_WINDOWS and end > start:
        edges = np.linspace(start, end, count + 1)
        bounds = np.r_[-math.inf, edges[1:-1], math.inf]
        largest = max(spilled.event_count(bounds[max(i - 1, 0)], bounds[min(i + 2, count)])
                      for i in range(count))
        if largest <= allowed:
            break
        count *= 2
    if count == 1:
        return whole
    edges = np.linspace(start, end, count + 1)
    return StepWindows(numbers=np.arange(count, dtype=np.int64), starts=edges[:-1].copy(),
                       ends=edges[1:].copy(), source=TIME_WINDOWS,
                       notes=["No ProfilerStep or optimizer-step events: the trace, too large "
                              f"to read whole, is cut into {count} equal time windows, each "
                              "analysed as a step."])


def streamed_steps(spilled: SpilledTrace, recorded: StepWindows, per: int) -> StepWindows:
    """``find_steps`` of the whole trace, re-timing window by window over the recorded
    steps (each window answers for its own steps' device spans)."""
    steps = StepWindows(numbers=recorded.numbers.copy(), starts=recorded.starts.copy(),
                        ends=recorded.ends.copy(), source=recorded.source,
                        notes=list(recorded.notes))
    steps.keep_recorded()
    if steps.source in ("whole trace", TIME_WINDOWS) or not spilled.has_gpu:
        return steps
    n = len(steps)
    parts = []
    for first in range(0, n, per):
        stop = min(first + per, n)
        trace = spilled.window(*window_bounds(recorded, first, stop))
        parts.append(device_spans(trace, recorded, first, stop))
    spans = DeviceSpans(counts=np.concatenate([p.counts for p in parts]),
                        first=np.concatenate([p.first for p in parts]),
                        last=np.concatenate([p.last for p in parts]),
                        early_end=parts[0].early_end)
    retime(steps, spans)
    return steps


def margin_steps(spilled: SpilledTrace, steps: StepWindows) -> int:
    """Steps of margin each side of a window: one, or for time windows as many as the longest
    event spans (a slice of a long synchronisation must see where it started)."""
    if steps.source != TIME_WINDOWS or not len(steps):
        return MARGIN_STEPS
    longest = max((float(np.nanmax(p.column("events", "dur"))) for p in spilled.pieces
                   if p.rows["events"]), default=0.0)
    width = float(steps.durations[0])
    if not math.isfinite(longest) or width <= 0:
        return MARGIN_STEPS
    return max(MARGIN_STEPS, min(math.ceil(longest / width), len(steps)))


def stream_windows(spilled: SpilledTrace, steps: StepWindows, per: int,
                   margin: int = MARGIN_STEPS) -> Iterator[Window]:
    """The windows of ``per`` steps, assembled one at a time."""
    n = max(len(steps), 1)
    firsts = list(range(0, n, per))
    for i, first in enumerate(firsts):
        stop = min(first + per, len(steps))
        yield Window(trace=spilled.window(*window_bounds(steps, first, stop, margin)),
                     steps=step_range(steps, first, stop), index=i, count=len(firsts),
                     region=region_of(steps, first, stop), all_span=steps.span,
                     all_recorded_span=steps.recorded_span)


def fitting_steps(spilled: SpilledTrace, steps: StepWindows, budget: int) -> int:
    """The most steps per window whose largest window fits ``budget`` (at least 1)."""
    n = len(steps)
    allowed = max(budget - STREAM_BASE_BYTES, 0) // WINDOW_BYTES_PER_EVENT
    per = max(n, 1)
    while per > 1:
        largest = max(spilled.event_count(*window_bounds(steps, f, min(f + per, n)))
                      for f in range(0, n, per))
        if largest <= allowed:
            break
        per = max(per // 2, 1)
    return per


def _marker_trace(spilled: SpilledTrace) -> Trace:
    trace = spilled.window(math.inf, math.inf)
    trace.events = spilled.markers
    return trace


def _whole_span(spilled: SpilledTrace) -> tuple[float, float]:
    """The whole-trace step of ``find_steps``: first host start to the last end."""
    host_start, host_end, any_end = math.inf, -math.inf, -math.inf
    has_host = False
    pick = np.array([*HOST_KINDS, Kind.RUNTIME], dtype=np.uint8)
    for piece in spilled.pieces:
        if not piece.rows["events"]:
            continue
        ts = piece.column("events", "ts") - spilled.shift
        end = ts + piece.column("events", "dur")
        host = np.isin(piece.column("events", "kind"), pick)
        any_end = max(any_end, float(end.max()))
        if host.any():
            has_host = True
            host_start = min(host_start, float(ts[host].min()))
            host_end = max(host_end, float(end[host].max()))
    if not has_host:
        first, _ = spilled.time_span()
        return first, any_end
    return host_start, max(host_end, any_end)
