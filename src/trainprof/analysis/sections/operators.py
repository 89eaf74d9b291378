"""Per-operator host and device time, the TensorBoard plugin's operator view.

Host total is the op's duration; host self subtracts its direct children in the call tree (ops,
annotations, Python frames) and its own launch/runtime calls. Device self is the time of the
kernels, copies and memsets its own launch calls started; device total adds those of every op
below it. Everything is summed over the whole trace, per op name (or name and input shapes).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.calls.attribution import device_links
from trainprof.analysis.calls.callsites import python_sources, stack_sources, user_frames
from trainprof.analysis.calls.calltree import CallTree, call_tree, canonical_names
from trainprof.analysis.calls.precision import (
    Precision,
    PrecisionRow,
    PrecisionSums,
    outermost_sums,
    precision_rows,
)
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.options import OPERATOR_SORT_COLUMNS
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.streaming.parts import no_steps
from trainprof.analysis.streaming.windows import Window, WindowedSection, owns
from trainprof.analysis.tabular import group_ids
from trainprof.structs import Record
from trainprof.trace.model import Kind, Trace, is_operator_row

#: Call stacks kept per operator row, heaviest first.
TOP_STACKS = 3
#: GradScaler's own ops: unscaling with the inf/nan check, and the scale update.
GRAD_SCALER_OPS = re.compile(
    r"_amp_(?:foreach_)?non_finite_check_and_unscale_?|_amp_update_scale_?$")


class CallSite(Record):
    """Where an op was called from, and how much of its time came from there."""

    source: str | None  # the innermost frame of the user's code
    frames: list[str]  # the user-code frames of the call stack, innermost first
    calls: int
    host_total_us: float
    device_total_us: float


class OperatorRow(Record):
    """One op name (or name and input shapes), summed over its calls. Times in µs."""

    name: str
    calls: int
    host_self_us: float
    host_total_us: float
    device_self_us: float
    device_total_us: float
    shape: str | None = None  # the "Input Dims", when grouped by shape
    call_sites: list[CallSite] = field(default_factory=list)


class OperatorStats(Record):
    """The operator table of one trace, sorted by ``sort_by`` (largest first)."""

    sort_by: str
    by_shape: bool
    has_device: bool
    has_stacks: bool
    rows: list[OperatorRow]
    #: The outermost ops inside the steps whose every floating-point input is fp64
    #: (analysis/calls/precision.py), heaviest first.
    fp64_ops: list[PrecisionRow] = field(default_factory=list)

    def top(self, n: int) -> list[OperatorRow]:
        return self.rows[:n]

    def time_of(self, pattern: re.Pattern[str]) -> tuple[int, float, float]:
        """(calls, host total µs, device total µs) of the ops whose name matches."""
        rows = [r for r in self.rows if pattern.search(r.name)]
        return (sum(r.calls for r in rows), sum(r.host_total_us for r in rows),
                sum(r.device_total_us for r in rows))

    def sorted(self, sort_by: str) -> OperatorStats:
        """The same table in another order."""
        return OperatorStats(sort_by, self.by_shape, self.has_device, self.has_stacks,
                             _sort(self.rows, sort_by), self.fp64_ops)

    def to_pandas(self) -> Any:
        """One row per operator (call sites left out)."""
        return data_frame([{k: v for k, v in r.to_dict().items() if k != "call_sites"}
                           for r in self.rows])


class SiteSums(msgspec.Struct):
    """Per (row group, call site): the group's keys, the site, and its calls' count and times."""

    name: np.ndarray  # canonical name index of the group
    shape: np.ndarray  # shape index of the group
    site: np.ndarray  # stack index, or name index of the Python frame
    calls: np.ndarray
    host_us: np.ndarray
    device_us: np.ndarray
    labels: dict[int, tuple[str | None, list[str]]]  # site -> (source, frames)

    @classmethod
    def concat(cls, parts: list[SiteSums]) -> SiteSums:
        def cat(key: str) -> np.ndarray:
            return np.concatenate([getattr(p, key) for p in parts])

        return cls(cat("name"), cat("shape"), cat("site"), cat("calls"), cat("host_us"),
                   cat("device_us"), {s: x for p in parts for s, x in p.labels.items()})


class OperatorPart(msgspec.Struct):
    """What one window tells of the ops it owns: per group (canonical name, shape index),
    calls and summed times, and per (group, call site) the calls and times of its calls."""

    name: np.ndarray  # canonical name index
    shape: np.ndarray  # shape index (-1 without one; 0 for every row when not by shape)
    calls: np.ndarray
    times: dict[str, np.ndarray]  # host_self, host_total, device_self, device_total
    sites: SiteSums | None
    has_device: bool
    by_shape: bool
    names: list[str]  # the trace's tables (shared, not copies)
    shapes: list[str]
    fp64: PrecisionSums | None = None  # outermost fp64 ops inside the steps


def operator_part(window: Window, by_shape: bool = False) -> OperatorPart:
    """The ops that start in the window's region; their children, launches and kernels lie
    in the window with its margin."""
    trace = window.trace
    ev = trace.events
    tree = call_tree(trace)
    times = node_times(trace, tree)
    rows = _row_nodes(trace, tree)
    rows = rows[owns(window, ev.ts[tree.event[rows]])]
    names = canonical_names(ev.names)[ev.name[tree.event[rows]]]
    shapes = ev.shape[tree.event[rows]] if by_shape else np.zeros(len(rows), dtype=np.int64)
    first, group = group_ids(names, shapes)
    n = len(first)
    sites = _site_sums(trace, tree, rows, names, shapes, times) if _has_sites(trace, tree) \
        else None
    return OperatorPart(
        name=names[first], shape=shapes[first], calls=np.bincount(group, minlength=n),
        times={k: np.bincount(group, weights=v[rows], minlength=n) for k, v in times.items()},
        sites=sites,
        has_device=bool((ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
                         & owns(window, ev.ts)).any()),
        by_shape=by_shape, names=ev.names, shapes=ev.shapes,
        fp64=outermost_sums(trace, tree, _in_steps(window, tree), Precision.FP64, times),
    )


def _in_steps(window: Window, tree: CallTree) -> np.ndarray:
    """The CPU-op nodes the window owns that start inside one of its steps."""
    ev = window.trace.events
    event = tree.event
    steps = window.steps
    nodes = np.flatnonzero((ev.kind[event] == Kind.CPU_OP) & ~tree.merged
                           & owns(window, ev.ts[event]))
    ts = ev.ts[event[nodes]]
    i = np.searchsorted(steps.starts, ts, side="right") - 1
    inside = (i >= 0) & (ts < steps.ends[np.maximum(i, 0)]) if len(steps) else i < -1
    return nodes[inside]


def combine_operators(parts: list[OperatorPart], sort_by: str | None = None) -> OperatorStats:
    """The operator table of every window's ops, sorted by ``sort_by``."""
    has_device = any(p.has_device for p in parts)
    sort_by = _sort_column(sort_by, has_device)
    by_shape = parts[0].by_shape if parts else False
    names = parts[0].names if parts else []
    shapes_table = parts[0].shapes if parts else []
    if not parts or not sum(len(p.name) for p in parts):
        return OperatorStats(sort_by, by_shape, has_device, False, [])
    name = np.concatenate([p.name for p in parts])
    shape = np.concatenate([p.shape for p in parts])
    first, group = group_ids(name, shape)
    n = len(first)
    calls = np.bincount(group, weights=np.concatenate([p.calls for p in parts]), minlength=n)
    sums = {k: np.bincount(group, weights=np.concatenate([p.times[k] for p in parts]),
                           minlength=n) for k in parts[0].times}
    sites = _combine_sites(parts, name[first], shape[first])
    fp64 = precision_rows(PrecisionSums.concat([p.fp64 for p in parts if p.fp64 is not None]),
                          names)
    out = []
    for g in range(n):
        out.append(OperatorRow(
            name=names[name[first[g]]], calls=int(calls[g]),
            host_self_us=float(sums["host_self"][g]), host_total_us=float(sums["host_total"][g]),
            device_self_us=float(sums["device_self"][g]),
            device_total_us=float(sums["device_total"][g]),
            shape=(shapes_table[shape[first[g]]] if shape[first[g]] >= 0 else None)
            if by_shape else None,
            call_sites=sites.get(g, []),
        ))
    return OperatorStats(sort_by, by_shape, has_device, bool(sites), _sort(out, sort_by), fp64)


def operator_stats(trace: Trace, steps: StepWindows | None = None, *, by_shape: bool = False,
                   sort_by: str | None = None) -> OperatorStats:
    """The operator table: per op name (or name and input shapes), sorted by ``sort_by``
    (one of OPERATOR_SORT_COLUMNS; default device self time, or host self on CPU traces)."""
    _sort_column(sort_by, True)
    whole = Window(trace, steps if steps is not None else no_steps())
    return combine_operators([operator_part(whole, by_shape)], sort_by)


def _sort_column(sort_by: str | None, has_device: bool) -> str:
    sort_by = sort_by or ("device_self_us" if has_device else "host_self_us")
    if sort_by not in OPERATOR_SORT_COLUMNS:
        raise ValueError(f"cannot sort operators by {sort_by!r}; choose one of "
                         f"{', '.join(OPERATOR_SORT_COLUMNS)}")
    return sort_by


def operators_for(by_shape: bool = False, sort_by: str | None = None) -> WindowedSection:
    """The operator table as a section, grouped and sorted as asked (``AnalyzeOptions``'
    ``by_shape`` and ``sort_by``). Each window counts the ops that start in its region."""
    return WindowedSection(partial=lambda window: operator_part(window, by_shape),
                           combine=lambda parts, steps: combine_operators(parts, sort_by),
                           cost=1.05)


#: The registered section, with the default options (``sections_for`` builds the others).
operators_section = operators_for()


def node_times(trace: Trace, tree: CallTree) -> dict[str, np.ndarray]:
    """Host self/total and device self/total (µs) of every call-tree node."""
    ev = trace.events
    n = len(tree)
    dur = ev.dur[tree.event]
    counted = (tree.owner >= 0) & ~tree.merged
    into = tree.rep[np.maximum(tree.owner, 0)]
    children = np.bincount(into[counted], weights=dur[counted], minlength=n)
    links = device_links(trace)
    linked = links.owner >= 0
    device_self = np.bincount(links.owner[linked], weights=ev.dur[links.device[linked]],
                              minlength=n)
    # Descendants are a contiguous run in depth-first order: a difference of prefix sums.
    cum = np.concatenate([[0.0], np.cumsum(device_self)])
    return {
        "host_self": np.maximum(dur - children, 0.0),
        "host_total": dur,
        "device_self": device_self,
        "device_total": cum[tree.end] - cum[np.arange(n)],
    }


def _row_nodes(trace: Trace, tree: CallTree) -> np.ndarray:
    ev = trace.events
    listed = np.array([is_operator_row(Kind.CPU_OP, s) for s in ev.names], dtype=bool)
    node_kind = ev.kind[tree.event]
    keep = (node_kind == Kind.CPU_OP) & listed[ev.name[tree.event]] & ~tree.merged
    return np.flatnonzero(keep)


def _sort(rows: list[OperatorRow], sort_by: str) -> list[OperatorRow]:
    if sort_by == "name":
        return sorted(rows, key=lambda r: (r.name, r.shape or ""))
    return sorted(rows, key=lambda r: (-getattr(r, sort_by), r.name, r.shape or ""))


def _has_sites(trace: Trace, tree: CallTree) -> bool:
    ev = trace.events
    return bool(ev.stacks) or bool((ev.kind[tree.event] == Kind.PYTHON).any())


def _site_sums(trace: Trace, tree: CallTree, rows: np.ndarray, names: np.ndarray,
               shapes: np.ndarray, times: dict[str, np.ndarray]) -> SiteSums | None:
    """The call sites of the rows (grouped by ``names`` and ``shapes``): the ``Call stack``
    when recorded, else the nearest Python frame of the user's code around the op."""
    ev = trace.events
    if ev.stacks:
        site = ev.stack[tree.event[rows]]
    else:
        site = python_sources(trace, tree)[rows]
        site = np.where(site >= 0, ev.name[tree.event[np.maximum(site, 0)]], -1)
    has = site >= 0
    if not has.any():
        return None
    first, sub = group_ids(names[has], shapes[has], site[has])
    owner_site = site[has][first]
    if ev.stacks:
        sources = stack_sources(trace)
        labels = {int(s): (sources[s], user_frames(ev.stacks[s])) for s in np.unique(owner_site)}
    else:
        labels = {int(s): (ev.names[s], [ev.names[s]]) for s in np.unique(owner_site)}
    return SiteSums(names[has][first], shapes[has][first], owner_site, np.bincount(sub),
                    np.bincount(sub, weights=times["host_total"][rows[has]]),
                    np.bincount(sub, weights=times["device_total"][rows[has]]), labels)


def _combine_sites(parts: list[OperatorPart], name: np.ndarray,
                   shape: np.ndarray) -> dict[int, list[CallSite]]:
    """The heaviest call sites of each row group (``name``, ``shape``: its keys), heaviest
    device time first, then host time, then by site index, as on the whole trace."""
    found = [p.sites for p in parts if p.sites is not None]
    if not found:
        return {}
    s = SiteSums.concat(found)
    first, sub = group_ids(s.name, s.shape, s.site)
    host = np.bincount(sub, weights=s.host_us)
    device = np.bincount(sub, weights=s.device_us)
    calls = np.bincount(sub, weights=s.calls)
    row_of = {(int(a), int(b)): g for g, (a, b) in enumerate(zip(name, shape, strict=True))}
    owner_group = np.array([row_of[(int(a), int(b))] for a, b in
                            zip(s.name[first], s.shape[first], strict=True)])
    owner_site = s.site[first]
    order = np.lexsort((-host, -device, owner_group))
    out: dict[int, list[CallSite]] = {}
    for k in order:
        g = int(owner_group[k])
        kept = out.setdefault(g, [])
        if len(kept) < TOP_STACKS:
            source, frames = s.labels[int(owner_site[k])]
            kept.append(CallSite(source, frames, int(calls[k]), float(host[k]),
                                 float(device[k])))
    return out
