"""The loaded columns of traces as Arrow tables: events, kernels, ops, steps, ranks, findings.

Times are µs from the start of the rank's trace (``ranks.t0_us`` is that start, absolute);
sizes are bytes. Names and strings are dictionary-encoded, so a table costs little more than
the columns it is made from. The columns are documented in docs/sql.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.sections.communication import _HostComm, _kernel_types
from trainprof.sql.extras import require
from trainprof.trace.model import COLLECTIVE_TYPES, FLAG_COMM, Kind, Trace

#: The tables every trace gives, in the order they are written.
TRACE_TABLES = ("events", "kernels", "ops", "steps", "ranks")
#: Every table ``trainprof sql`` knows (findings need the analysis).
ALL_TABLES = (*TRACE_TABLES, "findings")
_KIND_NAMES = [k.name.lower() for k in Kind]


def _pa() -> Any:
    return require("pyarrow", "Export and SQL over traces")


def _dictionary(codes: np.ndarray, values: list[str]) -> Any:
    """A dictionary array (null where ``codes`` is -1)."""
    pa = _pa()
    codes = np.asarray(codes, dtype=np.int32)
    mask = codes < 0
    indices = pa.array(np.where(mask, 0, codes), type=pa.int32(),
                       mask=mask if mask.any() else None)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values or [""], type=pa.string()))


def _nullable(values: np.ndarray, missing: np.ndarray) -> Any:
    """An Arrow array with nulls where ``missing`` is true."""
    return _pa().array(values, mask=missing if missing.any() else None)


def step_of(steps: StepWindows, ts: np.ndarray) -> np.ndarray:
    """The step number each start time falls in, -1 outside every step."""
    if not len(steps):
        return np.full(len(ts), -1, dtype=np.int64)
    pos = np.searchsorted(steps.starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < steps.ends[np.maximum(pos, 0)])
    return np.where(inside, steps.numbers[np.maximum(pos, 0)], -1).astype(np.int64)


def _threads(trace: Trace) -> tuple[list[str], list[str]]:
    return ([str(p) for p, _ in trace.threads] or [""], [str(t) for _, t in trace.threads] or [""])


def _common(trace: Trace, idx: np.ndarray, step: np.ndarray) -> dict[str, Any]:
    """Columns every event table starts with."""
    pa, ev = _pa(), trace.events
    n = len(idx)
    return {
        "rank": pa.array(np.full(n, trace.rank, dtype=np.int32)),
        "rank_window": pa.array(np.full(n, trace.window, dtype=np.int32)),
        "name": _dictionary(ev.name[idx], ev.names),
        "ts_us": pa.array(ev.ts[idx]),
        "dur_us": pa.array(ev.dur[idx]),
        "end_us": pa.array(ev.ts[idx] + ev.dur[idx]),
        "step": _nullable(step[idx], step[idx] < 0),
    }


def events_table(trace: Trace, step: np.ndarray) -> Any:
    """Every complete event of the trace."""
    pa, ev = _pa(), trace.events
    idx = np.arange(len(ev))
    pids, tids = _threads(trace)
    cols = _common(trace, idx, step)
    cols.update({
        "kind": _dictionary(ev.kind.astype(np.int32), _KIND_NAMES),
        "pid": _dictionary(ev.tid, pids),
        "tid": _dictionary(ev.tid, tids),
        "device": _nullable(ev.device.astype(np.int32), ev.device < 0),
        "stream": _nullable(ev.stream, ev.stream < 0),
        "correlation": _nullable(ev.correlation, ev.correlation < 0),
        "external_id": _nullable(ev.external_id, ev.external_id < 0),
        "nbytes": _nullable(ev.nbytes, ~np.isfinite(ev.nbytes)),
        "flops": _nullable(ev.flops, ~np.isfinite(ev.flops)),
        "is_communication": pa.array(ev.flagged(FLAG_COMM)),
        "input_dims": _dictionary(ev.shape, ev.shapes),
    })
    return pa.table(cols)


def kernels_table(trace: Trace, step: np.ndarray) -> Any:
    """GPU kernels, with launch size, occupancy and, for collectives, their type and size."""
    pa, ev = _pa(), trace.events
    idx = np.flatnonzero(ev.kind == Kind.KERNEL)
    comm = ev.flagged(FLAG_COMM)[idx]
    types, nbytes = _collectives(trace, idx, comm)
    cols = _common(trace, idx, step)
    cols.update({
        "device": pa.array(ev.device[idx].astype(np.int32)),
        "stream": _nullable(ev.stream[idx], ev.stream[idx] < 0),
        "correlation": _nullable(ev.correlation[idx], ev.correlation[idx] < 0),
        "blocks_per_sm": _nullable(ev.blocks_per_sm[idx], ~np.isfinite(ev.blocks_per_sm[idx])),
        "occupancy_pct": _nullable(ev.occupancy[idx], ~np.isfinite(ev.occupancy[idx])),
        "is_communication": pa.array(comm),
        "collective": pa.array(types, type=pa.string()),
        "message_bytes": _nullable(nbytes, ~np.isfinite(nbytes)),
    })
    return pa.table(cols)


def _collectives(trace: Trace, idx: np.ndarray, comm: np.ndarray) -> tuple[list, np.ndarray]:
    """Collective type (None for compute kernels) and message bytes of each kernel."""
    types: list[str | None] = [None] * len(idx)
    nbytes = np.full(len(idx), np.nan)
    where = np.flatnonzero(comm)
    if len(where):
        # The communication section's own reading of types and sizes (docs/communication.md).
        codes, sizes = _kernel_types(trace, idx[where], _HostComm.of(trace))
        for w, code in zip(where, codes, strict=True):
            types[w] = COLLECTIVE_TYPES[int(code)]
        nbytes[where] = sizes
    return types, nbytes


def ops_table(trace: Trace, step: np.ndarray) -> Any:
    """Host CPU ops (``aten::*`` and the like), with their input shapes and FLOPs."""
    pa, ev = _pa(), trace.events
    idx = np.flatnonzero(ev.kind == Kind.CPU_OP)
    pids, tids = _threads(trace)
    cols = _common(trace, idx, step)
    cols.update({
        "pid": _dictionary(ev.tid[idx], pids),
        "tid": _dictionary(ev.tid[idx], tids),
        "external_id": _nullable(ev.external_id[idx], ev.external_id[idx] < 0),
        "flops": _nullable(ev.flops[idx], ~np.isfinite(ev.flops[idx])),
        "is_communication": pa.array(ev.flagged(FLAG_COMM)[idx]),
        "input_dims": _dictionary(ev.shape[idx], ev.shapes),
    })
    return pa.table(cols)


def steps_table(trace: Trace, steps: StepWindows) -> Any:
    """One row per step window."""
    pa = _pa()
    n = len(steps)
    return pa.table({
        "rank": pa.array(np.full(n, trace.rank, dtype=np.int32)),
        "rank_window": pa.array(np.full(n, trace.window, dtype=np.int32)),
        "step": pa.array(steps.numbers.astype(np.int64)),
        "start_us": pa.array(steps.starts),
        "end_us": pa.array(steps.ends),
        "dur_us": pa.array(steps.durations),
        "source": pa.array([steps.source] * n, type=pa.string()),
    })


def ranks_table(trace: Trace, steps: StepWindows) -> Any:
    """One row per rank and window: where it came from and what it ran on."""
    pa = _pa()
    return pa.table({
        "rank": pa.array([trace.rank], type=pa.int32()),
        "rank_window": pa.array([trace.window], type=pa.int32()),
        "file": pa.array([trace.path.name]),
        "device": pa.array([trace.device_name()]),
        "t0_us": pa.array([trace.t0_us]),
        "events": pa.array([len(trace.events)], type=pa.int64()),
        "steps": pa.array([len(steps)], type=pa.int64()),
        "step_source": pa.array([steps.source]),
    })


def findings_table(findings: Iterable[Any]) -> Any:
    """The diagnosis: one row per finding (``rank`` null for the whole job)."""
    pa = _pa()
    rows = [f.to_dict() if hasattr(f, "to_dict") else f for f in findings]
    return pa.table({
        "rank": pa.array([r.get("rank") for r in rows], type=pa.int32()),
        "rank_window": pa.array([r.get("window", 0) for r in rows], type=pa.int32()),
        "id": pa.array([r["id"] for r in rows], type=pa.string()),
        "severity": pa.array([str(r["severity"]) for r in rows], type=pa.string()),
        "title": pa.array([r["title"] for r in rows], type=pa.string()),
        "saving_pct": pa.array([float(r["saving_pct"]) for r in rows], type=pa.float64()),
        "saving_ms": pa.array([float(r["saving_ms"]) for r in rows], type=pa.float64()),
    })


def trace_tables(trace: Trace, names: Iterable[str] = TRACE_TABLES) -> dict[str, Any]:
    """The asked-for tables of one trace, by name."""
    steps = find_steps(trace)
    step = step_of(steps, trace.events.ts)
    makers = {
        "events": lambda: events_table(trace, step),
        "kernels": lambda: kernels_table(trace, step),
        "ops": lambda: ops_table(trace, step),
        "steps": lambda: steps_table(trace, steps),
        "ranks": lambda: ranks_table(trace, steps),
    }
    return {name: makers[name]() for name in names if name in makers}


def tables_of(traces: Iterable[Trace], names: Iterable[str] = TRACE_TABLES) -> dict[str, Any]:
    """The tables of several traces (the ranks of one job), one set with a ``rank`` column."""
    pa = _pa()
    parts: dict[str, list[Any]] = {}
    for trace in traces:
        for name, table in trace_tables(trace, names).items():
            parts.setdefault(name, []).append(table)
    return {name: pa.concat_tables(tables, promote_options="permissive")
            for name, tables in parts.items()}
