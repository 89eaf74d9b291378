"""Step windows, found once and shared by every analysis.

Steps come from ``ProfilerStep#N``. On a GPU run each step is re-timed to the device side the
way the TensorBoard plugin did it: a step ends when the last device work launched inside it ends,
and the next step starts no earlier than that; trailing steps whose kernels were not captured are
dropped. Without ProfilerStep events, steps are inferred from repeated ``Optimizer.step``
annotations, and failing that the whole trace is one window (with a note saying so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.calls.cache import per_trace
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.step_spread import step_spread
from trainprof.formatting import counted
from trainprof.structs import Record, fields
from trainprof.trace.model import DEVICE_KINDS, FLAG_OPTIMIZER, LAUNCH_KINDS, Kind, Trace

#: A trailing step launching fewer device events than this share of the step before it is
#: dropped: the profiler most likely stopped before its kernels were recorded (plugin's rule).
TAIL_STEP_MIN_SHARE = 0.8
# Slow steps (outliers): analysis/overview/step_spread.py, shared with the live view.


#: ``StepWindows.source`` of equal time windows cut from a trace without steps when it is
#: streamed (analysis/streaming/streamed.py): slices, not steps.
TIME_WINDOWS = "time window"


class StepWindows(msgspec.Struct):
    """Step boundaries (µs from the trace's t0) and where they came from."""

    numbers: np.ndarray  # int64 step numbers
    starts: np.ndarray  # float64
    ends: np.ndarray  # float64
    source: str  # "ProfilerStep", "optimizer", "whole trace", or "time window" (streamed)
    notes: list[str] = field(default_factory=list)
    #: The same steps as recorded, before re-timing to the device (None: ``starts``/``ends``).
    recorded_starts: np.ndarray | None = None
    recorded_ends: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def durations(self) -> np.ndarray:
        return self.ends - self.starts

    @property
    def span(self) -> tuple[float, float]:
        """From the first step's start to the last step's end."""
        if not len(self.starts):
            return (0.0, 0.0)
        return float(self.starts[0]), float(self.ends[-1])

    @property
    def recorded_span(self) -> tuple[float, float]:
        """``span`` of the steps as recorded (the ProfilerStep ranges), before re-timing."""
        if self.recorded_starts is None or self.recorded_ends is None or not len(self.starts):
            return self.span
        return float(self.recorded_starts[0]), float(self.recorded_ends[-1])

    def keep_recorded(self) -> None:
        """Remember the current bounds as the recorded ones (before re-timing them)."""
        self.recorded_starts, self.recorded_ends = self.starts.copy(), self.ends.copy()


#: (numbers, starts, ends, source) of the steps found.
_Steps = tuple[np.ndarray, np.ndarray, np.ndarray, str]


@per_trace
def launch_links(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(device event index, launch event index) pairs joined on the correlation id (worked
    out once per trace, read-only: several sections and the step finder share them)."""
    ev = trace.events
    launches = np.flatnonzero(ev.of_kind(*LAUNCH_KINDS) & (ev.correlation >= 0))
    devices = np.flatnonzero(ev.of_kind(*DEVICE_KINDS) & (ev.correlation >= 0))
    if not len(launches) or not len(devices):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    corr = ev.correlation[launches]
    order = np.argsort(corr, kind="stable")
    sorted_corr = corr[order]
    pos = np.searchsorted(sorted_corr, ev.correlation[devices])
    pos = np.minimum(pos, len(sorted_corr) - 1)
    hit = sorted_corr[pos] == ev.correlation[devices]
    device, launch = devices[hit], launches[order[pos[hit]]]
    device.flags.writeable = launch.flags.writeable = False
    return device, launch


def find_steps(trace: Trace) -> StepWindows:
    """The step windows of a trace (see the module docstring)."""
    ev = trace.events
    steps = _profiler_steps(trace)
    if steps is None:
        steps = _optimizer_steps(trace)
    if steps is None:
        host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME)
        pick = host if host.any() else np.ones(len(ev), dtype=bool)
        start = float(ev.ts[pick].min()) if pick.any() else 0.0
        end = float(max(event_ends(ev)[pick].max(), event_ends(ev).max())) if pick.any() else 0.0
        return StepWindows(
            numbers=np.array([0]),
            starts=np.array([start]),
            ends=np.array([end]),
            source="whole trace",
            notes=["No ProfilerStep or optimizer-step events: the whole trace is one window."],
        )
    numbers, starts, ends, source = steps
    windows = StepWindows(numbers=numbers, starts=starts, ends=ends, source=source)
    windows.keep_recorded()
    if trace.has_gpu:
        _retime_to_device(trace, windows)
    return windows


def _profiler_steps(trace: Trace) -> _Steps | None:
    ev = trace.events
    idx = np.flatnonzero(ev.kind == Kind.STEP)
    if not len(idx):
        return None
    numbers = np.array([int(ev.names[n].rsplit("#", 1)[1]) for n in ev.name[idx]], dtype=np.int64)
    # The same step can be recorded twice (cpu_op and user_annotation): keep the first of each.
    _, first = np.unique(numbers, return_index=True)
    idx, numbers = idx[first], numbers[first]
    order = np.argsort(ev.ts[idx], kind="stable")
    idx, numbers = idx[order], numbers[order]
    return numbers, ev.ts[idx].copy(), event_ends(ev)[idx].copy(), "ProfilerStep"


def _optimizer_steps(trace: Trace) -> _Steps | None:
    """Steps bounded by the ends of consecutive ``Optimizer.step`` annotations."""
    ev = trace.events
    not_zero_grad = np.array(["zero_grad" not in n for n in ev.names], dtype=bool)
    idx = np.flatnonzero(ev.flagged(FLAG_OPTIMIZER) & not_zero_grad[ev.name])
    if len(idx) < 2:
        return None
    # Nested annotations of one step (e.g. Optimizer.step# around optimizer.step) end together;
    # keep the outermost per step by taking distinct, non-nested spans.
    ends = event_ends(ev)[idx]
    starts = ev.ts[idx]
    keep = np.ones(len(idx), dtype=bool)
    reach = -np.inf
    for i in range(len(idx)):  # few events: one per step
        if starts[i] < reach:
            keep[i] = False
        else:
            reach = ends[i]
    ends = ends[keep]
    if len(ends) < 2:
        return None
    starts, ends = ends[:-1].copy(), ends[1:].copy()
    return np.arange(1, len(ends) + 1, dtype=np.int64), starts, ends, "optimizer"


class DeviceSpans(msgspec.Struct):
    """Per step (of some range of steps): device events launched inside it (count, first
    start, last end), and for the range holding the first step the last end of unmatched
    device work that ends before the first step's device work starts (-inf when none)."""

    counts: np.ndarray
    first: np.ndarray
    last: np.ndarray
    early_end: float = -np.inf


def device_spans(trace: Trace, w: StepWindows, lo: int = 0, hi: int | None = None
                 ) -> DeviceSpans:
    """The ``DeviceSpans`` of steps ``lo`` to ``hi - 1`` of ``w`` (the steps as recorded) from
    the device events and launches of ``trace`` (the whole trace, or a window holding those
    steps with a step of margin)."""
    ev = trace.events
    n = len(w.starts)
    hi = n if hi is None else hi
    empty = DeviceSpans(np.zeros(hi - lo, dtype=np.int64), np.full(hi - lo, np.inf),
                        np.full(hi - lo, -np.inf))
    dev_idx, launch_idx = launch_links(trace)
    if not len(dev_idx):
        return empty
    l_start, l_end = ev.ts[launch_idx], event_ends(ev)[launch_idx]
    # The step a launch falls in: the last step starting at or before it, if it ends inside it.
    step_of = np.searchsorted(w.starts, l_start, side="right") - 1
    inside = step_of >= 0
    inside[inside] &= l_end[inside] <= w.ends[step_of[inside]]
    own = inside & (step_of >= lo) & (step_of < hi)
    d_start, d_end = ev.ts[dev_idx], event_ends(ev)[dev_idx]
    out = DeviceSpans(np.bincount(step_of[own] - lo, minlength=hi - lo), empty.first,
                      empty.last)
    np.minimum.at(out.first, step_of[own] - lo, d_start[own])
    np.maximum.at(out.last, step_of[own] - lo, d_end[own])
    if lo == 0 and hi > 0 and np.isfinite(out.first[0]):
        # Device work launched before the first step that still runs as it starts delays it.
        matched = np.zeros(len(ev), dtype=bool)
        matched[dev_idx[inside]] = True
        device_mask = ev.of_kind(*DEVICE_KINDS) & ~matched
        early = event_ends(ev)[device_mask]
        early = early[early < out.first[0]]
        if len(early):
            out.early_end = float(early.max())
    return out


def retime(w: StepWindows, spans: DeviceSpans) -> None:
    """Re-time the steps to the device side from their ``DeviceSpans`` (all steps)."""
    n = len(w.starts)
    if not spans.counts.any():
        return
    dev_max = spans.last
    prev_end = max(w.starts[0], spans.early_end) if n else 0.0
    for i in range(n):  # one iteration per step
        start = max(prev_end, w.starts[i])
        end = w.ends[i] if not np.isfinite(dev_max[i]) else max(w.ends[i], dev_max[i])
        end = max(end, start)
        w.starts[i], w.ends[i] = start, end
        prev_end = end
    _drop_uncaptured_tail(w, spans.counts)


def _retime_to_device(trace: Trace, w: StepWindows) -> None:
    retime(w, device_spans(trace, w))


def _drop_uncaptured_tail(w: StepWindows, matched_counts: np.ndarray) -> None:
    n = len(w.starts)
    if n < 2:
        return
    with_device = np.flatnonzero(matched_counts > 0)
    if not len(with_device):
        return
    last = int(with_device[-1])
    keep = last + 1
    if last > 0 and matched_counts[last - 1] * TAIL_STEP_MIN_SHARE > matched_counts[last]:
        keep = last
    if keep < n:
        w.notes.append(
            f"Dropped the last {counted(n - keep, 'step')}: the profiler stopped before their device "
            "work was recorded."
        )
        w.numbers, w.starts, w.ends = w.numbers[:keep], w.starts[:keep], w.ends[:keep]
        if w.recorded_starts is not None and w.recorded_ends is not None:
            w.recorded_starts, w.recorded_ends = w.recorded_starts[:keep], w.recorded_ends[:keep]


class _Step(TypedDict):
    step: int
    ms: float


class StepTime(_Step, total=False):
    """One step's number and time (ms), as in the JSON result's ``steps.per_step``; the HTML
    report's input adds the step's ms per category (``trainprof report``: commands/report.py)."""

    breakdown_ms: dict[str, float]


class StepStats(Record):
    """Per-step times and their summary, in ms (``steps`` of the JSON result, less its source).
    The defaults are those of a window without steps."""

    count: int = 0
    mean_ms: float = 0.0
    median_ms: float = 0.0
    p90_ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0
    cv: float = 0.0
    per_step: list[StepTime] = field(default_factory=list)
    #: Outliers (see analysis/overview/step_spread.py; never the last step), the runs of them, their mean
    #: excess over the median per step, and their period when they come every N > 1 steps
    #: (three or more).
    slow_steps: list[int] = field(default_factory=list)
    slow_episodes: int = 0
    slow_excess_ms: float = 0.0
    slow_period: int | None = None
    #: The work in a step: the median number of ops a step runs (``cpu_op`` events, every
    #: depth; None: the trace has none), and the slow steps' mean, so that a slow step doing
    #: extra work (more ops) tells itself from one doing the same work slower.
    ops_per_step: float | None = None
    slow_step_ops: float | None = None
    #: Where the slow steps' excess went: per breakdown category, the slow steps' mean time
    #: above the median of the other steps (ms; the categories that grew, largest first).
    slow_excess_by_category_ms: dict[str, float] = field(default_factory=dict)

    json_omit_empty = frozenset({"ops_per_step", "slow_step_ops", "slow_excess_by_category_ms"})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepStats:
        """From a JSON result's ``steps`` (extra keys, e.g. ``source``, are left out; missing
        ones take the defaults)."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def step_stats(w: StepWindows, host_ops: np.ndarray | None = None,
               breakdown_us: Mapping[str, np.ndarray] | None = None) -> StepStats:
    """Per-step times and their summary, in ms; ``host_ops`` (ops per step) and
    ``breakdown_us`` (µs per category and step) say what the slow steps did."""
    ms = w.durations / 1000.0
    if not len(ms):
        return StepStats()
    spread = step_spread(ms, w.numbers)
    numbers = np.asarray(spread.slow_steps, dtype=np.int64)
    gaps = np.unique(np.diff(numbers))
    slow = np.isin(w.numbers, numbers)
    ops = host_ops if host_ops is not None and len(host_ops) == len(ms) and host_ops.any() \
        else None  # None: not counted, or the trace has no ops
    return StepStats(
        count=int(len(ms)),
        mean_ms=spread.mean_ms,
        median_ms=spread.median_ms,
        p90_ms=float(np.percentile(ms, 90)),
        min_ms=float(ms.min()),
        max_ms=float(ms.max()),
        cv=spread.cv,
        per_step=[{"step": int(s), "ms": float(m)} for s, m in zip(w.numbers, ms, strict=True)],
        slow_steps=list(spread.slow_steps),
        slow_episodes=spread.slow_episodes,
        slow_excess_ms=spread.slow_excess_ms,
        slow_period=(int(gaps[0]) if len(numbers) >= 3 and len(gaps) == 1 and gaps[0] > 1
                     else None),
        ops_per_step=float(np.median(ops)) if ops is not None else None,
        slow_step_ops=float(ops[slow].mean()) if ops is not None and slow.any() else None,
        slow_excess_by_category_ms=_slow_excess(breakdown_us, slow),
    )


def _slow_excess(breakdown_us: Mapping[str, np.ndarray] | None, slow: np.ndarray
                 ) -> dict[str, float]:
    """Per category, the slow steps' mean above the other steps' median (ms), where it grew."""
    if breakdown_us is None or not slow.any() or slow.all():
        return {}
    grew = {}
    for category, us in breakdown_us.items():
        if len(us) != len(slow):
            return {}
        excess = (float(us[slow].mean()) - float(np.median(us[~slow]))) / 1000.0
        if excess > 0:
            grew[category] = excess
    return dict(sorted(grew.items(), key=lambda kv: -kv[1]))
