"""A time slice of a loaded trace: the events that start in ``[start, end)``, as a ``Trace``.

Events, memory events and flows are sorted by start time, so a slice is a contiguous range of
the events and memory events (numpy views, no copy); flows are picked by time. The tables the columns index (names, shapes, stacks,
details, threads) are shared with the whole trace. Streaming analysis (analysis/streaming/windows.py)
analyses a long trace window by window through slices like these.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import numpy as np

from trainprof import structs
from trainprof.trace.kernel_context import LAUNCH_CONTEXT_KEY
from trainprof.trace.model import Events, Flows, MemoryEvents, Trace

T = TypeVar("T", Events, MemoryEvents, Flows)


def time_slice(trace: Trace, start: float = -math.inf, end: float = math.inf) -> Trace:
    """The events of ``trace`` that start in ``[start, end)`` (µs from ``t0_us``)."""
    ev = trace.events
    lo, hi = _bounds(ev.ts, start, end)
    mem_lo, mem_hi = _bounds(trace.memory.ts, start, end)
    flow_ts = trace.flows.ts  # flows are not sorted; one without a time goes in every slice
    flows = ~(flow_ts < start) & ~(flow_ts >= end)
    sliced = Trace(
        path=trace.path,
        rank=trace.rank,
        window=trace.window,
        t0_us=trace.t0_us,
        events=_rows(ev, Events, slice(lo, hi)),
        memory=_rows(trace.memory, MemoryEvents, slice(mem_lo, mem_hi)),
        flows=_rows(trace.flows, Flows, flows),
        threads=trace.threads,
        metadata=trace.metadata,
        notes=list(trace.notes),
    )
    by_launch = trace.__dict__.get(LAUNCH_CONTEXT_KEY)
    if by_launch is not None:
        kept = by_launch[(by_launch >= lo) & (by_launch < hi)]
        sliced.__dict__[LAUNCH_CONTEXT_KEY] = kept - lo
    return sliced


def _bounds(ts: np.ndarray, start: float, end: float) -> tuple[int, int]:
    lo = 0 if start == -math.inf else int(np.searchsorted(ts, start, side="left"))
    hi = len(ts) if end == math.inf else int(np.searchsorted(ts, end, side="left"))
    return lo, max(lo, hi)


def _rows(columns: Any, cls: type[T], rows: slice | np.ndarray) -> T:
    """Some rows of a columns Struct (a slice is a view); list fields (tables) are shared."""
    values: dict[str, Any] = {}
    for f in structs.fields(cls):
        value = getattr(columns, f.name)
        values[f.name] = value[rows] if isinstance(value, np.ndarray) else value
    return cls(**values)
