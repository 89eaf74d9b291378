"""Two runs side by side: step time, breakdown and phase deltas; ops and kernels that changed.

Each side is a trace file or folder, an ``Analysis``, or a list of loaded traces. Per-name
figures are per step (totals divided by the steps analysed, summed over ranks) so runs of
different lengths compare. Op and kernel totals come from the ``operators`` (host self and
device self time) and ``kernels`` sections when the analysis has them, else from plain per-name
sums over the step window (``name_totals``: host total time of ops, device time of kernels).
See docs/diff.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import msgspec
import numpy as np

from trainprof.analysis.analyze import analyze_ranks
from trainprof.analysis.deltas import (
    MIN_CHANGE_SHARE,
    MIN_CHANGE_US,
    Delta,
    NameDelta,
    TraceDiff,
)
from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.results import Analysis
from trainprof.trace.load import load
from trainprof.trace.model import Kind, Trace

Side = str | os.PathLike[str] | Analysis | Iterable[Trace]


class _Totals(msgspec.Struct):
    """Per name: calls and µs (and device µs of ops), summed over ranks; the steps covered."""

    calls: dict[str, float]
    us: dict[str, float]
    steps: int
    device_us: dict[str, float] | None = None


def diff(base: Side, new: Side) -> TraceDiff:
    """What changed from ``base`` to ``new``."""
    (a, a_traces), (b, b_traces) = _side(base), _side(new)
    notes: list[str] = []
    a_ops, metric_a = _op_totals(a, a_traces)
    b_ops, metric_b = _op_totals(b, b_traces)
    if metric_a != metric_b:
        notes.append(f"Ops compared by {metric_a} in the base and {metric_b} in the new run.")
    a_k, b_k = _kernel_totals(a, a_traces), _kernel_totals(b, b_traces)
    for label, totals in (("base", a_ops), ("new", b_ops)):
        if totals is None:
            notes.append(f"The {label} analysis has no operator table and no traces to sum.")
    return TraceDiff(
        step_ms=Delta(_median_step(a), _median_step(b)),
        breakdown_ms=_mean_deltas(a, b, "breakdown_ms"),
        phases_ms=_mean_deltas(a, b, "phases_ms"),
        ops=_name_deltas(a_ops, b_ops),
        kernels=_name_deltas(a_k, b_k),
        op_metric=metric_b,
        notes=notes,
    )


def _side(x: Side) -> tuple[Analysis, list[Trace] | None]:
    if isinstance(x, Analysis):
        return x, None
    traces = load(x) if isinstance(x, str | os.PathLike) else list(x)
    return analyze_ranks(traces), traces


def _median_step(a: Analysis) -> float | None:
    steps = [s["ms"] for r in a.ranks for s in r.steps.per_step]
    return float(np.median(steps)) if steps else None


def _mean_deltas(a: Analysis, b: Analysis, attr: str) -> dict[str, Delta]:
    def mean(x: Analysis, key: str) -> float | None:
        values = [getattr(r, attr).get(key) for r in x.ranks]
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    keys = dict.fromkeys([k for x in (a, b) for r in x.ranks for k in getattr(r, attr)])
    return {k: Delta(mean(a, k), mean(b, k)) for k in keys}


def _steps(a: Analysis) -> int:
    return sum(max(r.steps.count, 1) for r in a.ranks)


def _op_totals(a: Analysis, traces: list[Trace] | None) -> tuple[_Totals | None, str]:
    tables = [r.sections.operators for r in a.ranks]
    if tables and all(t is not None for t in tables):
        totals = _from_rows(tables, "host_self_us", _steps(a))
        if any(getattr(t, "has_device", False) for t in tables):
            totals.device_us = _from_rows(tables, "device_self_us", _steps(a)).us
        return totals, "host self"
    if traces is None:
        return None, "host total"
    return name_totals(traces, Kind.CPU_OP), "host total"


def _kernel_totals(a: Analysis, traces: list[Trace] | None) -> _Totals | None:
    tables = [r.sections.kernels for r in a.ranks]
    if tables and all(t is not None for t in tables):
        return _from_rows(tables, "total_us", _steps(a))
    return None if traces is None else name_totals(traces, Kind.KERNEL)


def _from_rows(tables: list[Any], attr: str, steps: int) -> _Totals:
    calls: dict[str, float] = {}
    us: dict[str, float] = {}
    for t in tables:
        for row in t.rows:
            calls[row.name] = calls.get(row.name, 0.0) + row.calls
            us[row.name] = us.get(row.name, 0.0) + getattr(row, attr)
    return _Totals(calls, us, steps)


def name_totals(traces: list[Trace], kind: Kind, windows: list[StepWindows] | None = None
                ) -> _Totals:
    """Calls and summed duration per name of events of ``kind`` inside each trace's steps
    (ops: inclusive host time; kernels: device time)."""
    calls: dict[str, float] = {}
    us: dict[str, float] = {}
    steps = 0
    for i, trace in enumerate(traces):
        w = windows[i] if windows else find_steps(trace)
        steps += max(len(w), 1)
        ev = trace.events
        start, end = w.span
        idx = np.flatnonzero((ev.kind == kind) & (ev.ts >= start) & (ev.ts < end))
        names, which = np.unique(ev.name[idx], return_inverse=True)
        n_calls = np.bincount(which, minlength=len(names))
        n_us = np.bincount(which, weights=ev.dur[idx], minlength=len(names))
        for j, name in enumerate(names):
            key = ev.names[name]
            calls[key] = calls.get(key, 0.0) + float(n_calls[j])
            us[key] = us.get(key, 0.0) + float(n_us[j])
    return _Totals(calls, us, steps)


def _name_deltas(a: _Totals | None, b: _Totals | None) -> list[NameDelta]:
    if a is None or b is None:
        return []
    device = a.device_us is not None and b.device_us is not None
    out = []
    for name in dict.fromkeys([*a.us, *b.us]):
        d = NameDelta(name, "same", a.calls.get(name, 0.0) / a.steps,
                      b.calls.get(name, 0.0) / b.steps, a.us.get(name, 0.0) / a.steps,
                      b.us.get(name, 0.0) / b.steps)
        if device and a.device_us is not None and b.device_us is not None:
            d.base_device_us = a.device_us.get(name, 0.0) / a.steps
            d.new_device_us = b.device_us.get(name, 0.0) / b.steps
        base = d.base_us + (d.base_device_us or 0.0)
        d.change = _change(name in a.us, name in b.us, base, d.delta_us)
        if d.change != "same":
            out.append(d)
    out.sort(key=lambda d: -abs(d.delta_us))
    return out


def _change(in_base: bool, in_new: bool, base_us: float, delta_us: float) -> str:
    if not in_base:
        return "added"
    if not in_new:
        return "removed"
    if abs(delta_us) < MIN_CHANGE_US or abs(delta_us) < MIN_CHANGE_SHARE * base_us:
        return "same"
    return "slower" if delta_us > 0 else "faster"
