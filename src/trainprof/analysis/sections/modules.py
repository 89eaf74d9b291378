"""The module view: time per ``nn.Module`` as a tree, forward and backward apart.

PyTorch's Python tracer writes a ``python_function`` event ``nn.Module: Linear_0`` around each
module call when recording with ``with_stack=True`` (``with_modules=True`` alone writes none for
eager models: it is for TorchScript). Those events are nodes of the host
call tree; a module's kernels are those launched under it. Backward work comes back to its module
through the ``fwdbwd`` flows: each links a forward op (inside a module) to the autograd node that
runs its backward. Figures are summed over the calls that start inside a step. docs/modules.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.calls.calltree import CallTree, call_tree, canonical_names, nearest_marked
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.sections.modules_backward import backward_nodes, enclosing
from trainprof.analysis.sections.operators import node_times
from trainprof.analysis.streaming.windows import Window, WindowedSection, owns
from trainprof.structs import Derived, Record
from trainprof.trace.model import DEVICE_KINDS, Kind, Trace

#: The name prefix PyTorch gives a module call's event.
MODULE_PREFIX = "nn.Module: "
#: What to do when a trace has no module events (shown instead of an empty tree).
HOW_TO_RECORD = ("This trace has no nn.Module events: record with with_stack=True, e.g. "
                 "trainprof.profile(with_stack=True) or torch.profiler.profile(with_stack=True), "
                 "to see the time per module.")
_SEPARATOR = "/"
#: Levels of a module's path that a finding's evidence shows.
SHORT_PATH_LEVELS = 3


class ModuleRow(Record):
    """One module path (``Net_0/Block_0/Linear_1``), summed over its calls. Times in µs."""

    name: str
    path: str
    depth: int
    parent: int  # row index of the enclosing module, -1 at the top
    calls: int
    host_self_us: float
    host_total_us: float
    device_self_us: float
    device_total_us: float
    backward_calls: int
    backward_host_self_us: float
    backward_host_total_us: float
    backward_device_self_us: float
    backward_device_total_us: float
    share_pct: float  # forward + backward total, on the tree's clock, of all step time


class ModuleTree(Record):
    """Rows in depth-first order (a parent before its children)."""

    json_derived = (Derived("available", ""),)
    json_internal = frozenset({"op_time"})

    clock: str  # "device" on GPU traces (shares from kernel time), "host" otherwise
    step_us: float
    steps: int
    backward_source: str | None  # "fwdbwd flows", or None when backward is not mapped
    note: str | None
    rows: list[ModuleRow]
    #: "device" or "host" -> op name -> {row index: µs}: the self time of the ops under each
    #: module (device: their kernels'); not in JSON, used to name modules in findings.
    op_time: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return bool(self.rows)

    def to_pandas(self) -> Any:
        """One row per module, depth first (``path`` names it; empty without module events)."""
        return data_frame([r.to_dict() for r in self.rows])

    def where(self, wanted: Callable[[str], object], clock: str | None = None
              ) -> ModuleShare | None:
        """Where the self time (on ``clock``, default the tree's) of the ops whose name
        ``wanted`` accepts lies: the heaviest module, and the heaviest module class (``Linear``
        for ``Linear_0``, ``Linear_1`` ...), which tells more when the time is spread over many
        layers. None when those ops took no time inside modules."""
        per_row: dict[int, float] = {}
        for name, rows in self.op_time.get(clock or self.clock, {}).items():
            if wanted(name):
                for row, us in rows.items():
                    per_row[row] = per_row.get(row, 0.0) + us
        total = sum(per_row.values())
        if total <= 0:
            return None
        row, us = max(per_row.items(), key=lambda kv: kv[1])
        per_class: dict[str, list[float]] = {}
        for r, t in per_row.items():
            per_class.setdefault(module_class(self.rows[r].name), []).append(t)
        kind, times = max(per_class.items(), key=lambda kv: sum(kv[1]))
        return ModuleShare(self.rows[row].path, us, us / total * 100.0, kind, len(times),
                           sum(times) / total * 100.0, self.short_path(row))

    def short_path(self, row: int, levels: int = SHORT_PATH_LEVELS) -> str:
        """The last ``levels`` names of a row's path, ``…/`` in front when there are more."""
        names: list[str] = []
        while row >= 0 and len(names) <= levels:
            names.append(self.rows[row].name)
            row = self.rows[row].parent
        cut = len(names) > levels
        return ("…" + _SEPARATOR if cut else "") + _SEPARATOR.join(reversed(names[:levels]))


class ModuleShare(msgspec.Struct):
    """Where some ops' time lies among the modules (``ModuleTree.where``)."""

    path: str  # the heaviest module
    us: float
    pct: float  # its share of those ops' time inside modules
    kind: str  # the heaviest module class
    kind_modules: int  # modules of that class holding some of it
    kind_pct: float
    short: str  # the heaviest module's path, its last levels only


def module_class(name: str) -> str:
    """``Linear_3`` -> ``Linear``: PyTorch numbers the instances of each class."""
    head, _, tail = name.rpartition("_")
    return head if head and tail.isdigit() else name


#: A path's place in call-tree order: (thread, start, -end, depth) of its first module call.
PathKey = tuple[float, float, float, int]
#: A path as the names along it (a name may hold the separator: the text is not a key).
Chain = tuple[str, ...]
_FWD = ("calls", "host_total", "host_self", "device_total", "device_self")
_BWD = ("calls", "host_self", "device_self")


class ModulesPart(msgspec.Struct):
    """What one window adds, keyed by module path (the names along it): bounded by the paths
    and op names, not by calls."""

    has_device: bool
    has_modules: bool  # module calls that the window owns
    paths: dict[Chain, tuple[PathKey, str, Chain | None]]  # -> (first call, text, parent)
    fwd: dict[Chain, list[float]]  # path -> the _FWD sums of its calls in the window's steps
    bwd: dict[Chain, list[float]]  # path -> the _BWD sums of the autograd nodes mapped to it
    #: clock -> (op name code, op name, path) -> self µs of those ops under that module
    op_time: dict[str, dict[tuple[int, str, Chain], float]]


def _modules_part(window: Window) -> ModulesPart:
    """The module calls (and their backward nodes) that start in the window's own steps."""
    trace = window.trace
    ev = trace.events
    tree = call_tree(trace)
    is_module = _module_nodes(trace, tree)
    node_ts = ev.ts[tree.event]
    owned = owns(window, node_ts)
    part = ModulesPart(bool(ev.of_kind(*DEVICE_KINDS).any()), bool((is_module & owned).any()),
                       {}, {}, {}, {"device": {}, "host": {}})
    if not is_module.any():
        return part
    times = node_times(trace, tree)
    module_of = nearest_marked(tree.parent, is_module)  # each node's innermost module
    nodes = np.flatnonzero(is_module)
    parent_module = np.where(tree.parent[nodes] >= 0,
                             module_of[np.maximum(tree.parent[nodes], 0)], -1)
    path_of_node, names, parents = _paths(trace, tree, nodes, parent_module)
    chains = _chains(names, parents)
    inside = _in_steps(node_ts, window.steps) & owned
    fwd = _forward_sums(times, nodes[inside[nodes]], parent_module[inside[nodes]],
                        path_of_node, len(names))
    bwd_nodes, bwd_module = backward_nodes(trace, tree, module_of)
    keep = inside[bwd_nodes]
    bwd_nodes, bwd_module = bwd_nodes[keep], bwd_module[keep]
    bwd = _backward_sums(times, bwd_nodes, path_of_node[bwd_module], parents)
    for p, path in enumerate(chains):
        if fwd["calls"][p]:
            part.fwd[path] = [float(fwd[k][p]) for k in _FWD]
        if bwd["calls"][p]:
            part.bwd[path] = [float(bwd[k][p]) for k in _BWD]
    owner = _op_owner(tree, module_of, bwd_nodes, bwd_module)
    identity = np.arange(len(names))
    for clock in ("device", "host"):
        per_op = _op_time(trace, tree, times[f"{clock}_self"], owner, path_of_node[owner],
                          identity, inside)
        part.op_time[clock] = {(code, name, chains[p]): us
                               for (code, name), rows in per_op.items()
                               for p, us in rows.items()}
    # A module call in the margin before the window may miss the calls around it (they
    # started earlier): its path is taken from the window that owns it. A path named by this
    # window's figures but first called in that margin is kept, with its enclosing paths.
    after = nodes[node_ts[nodes] >= window.region[0]]
    part.paths = _first_calls(trace, tree, after, path_of_node, names, parents, chains)
    named = {*part.fwd, *part.bwd, *(key[2] for c in part.op_time.values() for key in c)}
    if named - part.paths.keys():
        every = _first_calls(trace, tree, nodes, path_of_node, names, parents, chains)
        for chain in named:
            while chain and chain not in part.paths:
                part.paths[chain] = every[chain]
                chain = chain[:-1]
    return part


def _chains(names: list[tuple[str, str]], parents: np.ndarray) -> list[Chain]:
    """Each path as the names along it (a parent comes before its children)."""
    out: list[Chain] = []
    for (_, name), up in zip(names, parents.tolist(), strict=True):
        out.append((out[up] if up >= 0 else ()) + (name,))
    return out


def _first_calls(trace: Trace, tree: CallTree, nodes: np.ndarray, path_of_node: np.ndarray,
                 names: list[tuple[str, str]], parents: np.ndarray,
                 chains: list[Chain]) -> dict[Chain, tuple[PathKey, str, Chain | None]]:
    """Each path's first call in call-tree order, its text and its parent's path."""
    ev = trace.events
    e = tree.event[nodes]
    path = path_of_node[nodes]
    first = np.unique(path, return_index=True)[1]  # nodes are in call-tree order
    out = {}
    for i in first.tolist():
        p = int(path[i])
        key = (float(ev.tid[e[i]]), float(ev.ts[e[i]]), -float(event_ends(ev)[e[i]]), len(chains[p]))
        up = int(parents[p])
        out[chains[p]] = (key, names[p][0], chains[up] if up >= 0 else None)
    return out


def _modules_combine(parts: list[ModulesPart], steps: StepWindows) -> ModuleTree:
    """The module tree from every window's part: paths in call-tree order of first call."""
    clock = "device" if any(p.has_device for p in parts) else "host"
    step_us = float(steps.durations.sum())
    if not any(p.has_modules for p in parts):
        return ModuleTree(clock, step_us, len(steps), None, HOW_TO_RECORD, [])
    paths: dict[Chain, tuple[PathKey, str, Chain | None]] = {}
    for part in parts:
        for path, first in part.paths.items():
            if path not in paths or first[0] < paths[path][0]:
                paths[path] = first
    order = sorted(paths, key=lambda k: paths[k][0])
    index = {path: i for i, path in enumerate(order)}
    names = [(paths[path][1], path[-1]) for path in order]
    parents = np.array([-1 if (parent := paths[path][2]) is None else index[parent]
                        for path in order], dtype=np.int64)
    fwd = {k: np.zeros(len(order)) for k in _FWD}
    bwd = {k: np.zeros(len(order)) for k in _BWD}
    for part in parts:
        for sums, keys, into in ((part.fwd, _FWD, fwd), (part.bwd, _BWD, bwd)):
            for path, values in sums.items():
                for k, v in zip(keys, values, strict=True):
                    into[k][index[path]] += v
    for c in ("host", "device"):
        bwd[f"{c}_total"] = _subtree_sums(bwd[f"{c}_self"], parents)
    rows = [_row(p, names, parents, fwd, bwd, clock, step_us) for p in range(len(names))]
    for row in rows:
        row.depth = rows[row.parent].depth + 1 if row.parent >= 0 else 0
    rows, remap = _kept(rows, [i for i, r in enumerate(rows) if r.calls or r.backward_calls])
    op_time = {c: _combined_op_time(parts, c, index, remap) for c in ("device", "host")}
    source = "fwdbwd flows" if bwd["calls"].any() else None
    note = None if source else ("No backward work found for these modules: no forward-backward "
                                "(fwdbwd) flow starts inside them (an inference trace, or one "
                                "recorded without those flows).")
    return ModuleTree(clock, step_us, len(steps), source, note, rows, op_time)


def _combined_op_time(parts: list[ModulesPart], clock: str, index: dict[Chain, int],
                      remap: np.ndarray) -> dict[str, dict[int, float]]:
    """Per op name, its self time under each kept row, summed over the windows."""
    sums: dict[tuple[int, int], float] = {}
    named: dict[int, str] = {}
    for part in parts:
        for (code, name, path), us in part.op_time[clock].items():
            row = int(remap[index[path]])
            if row >= 0:
                sums[code, row] = sums.get((code, row), 0.0) + us
                named[code] = name
    out: dict[str, dict[int, float]] = {}
    for code, row in sorted(sums):
        out.setdefault(named[code], {})[row] = sums[code, row]
    return out


#: The module tree of one trace (the ``modules`` section): ``module_tree(trace, steps)``, or
#: window by window with ``module_tree.over(windows, steps)``. A window answers for the module
#: calls and backward nodes that start in its own steps; the enclosing module calls, the
#: forward ops whose ``fwdbwd`` flows lead to them and the kernels they launched are in its one
#: step of margin. It carries sums per module path and per (op, path).
module_tree: WindowedSection[ModulesPart, ModuleTree] = WindowedSection(_modules_part,
                                                                         _modules_combine,
                                                                         cost=0.02)


def _forward_sums(times: dict[str, np.ndarray], nodes: np.ndarray, parent_module: np.ndarray,
                  path_of_node: np.ndarray, n_paths: int) -> dict[str, np.ndarray]:
    """Per path, the forward figures of the module calls ``nodes`` (self: less the modules
    they called, ``parent_module`` being each call's enclosing module call)."""
    path = path_of_node[nodes]
    out: dict[str, np.ndarray] = {
        "calls": np.bincount(path, minlength=n_paths).astype(np.float64)}
    for clock in ("host", "device"):
        total = times[f"{clock}_total"][nodes]
        called = np.zeros(len(times[f"{clock}_total"]))
        up = parent_module >= 0
        np.add.at(called, parent_module[up], total[up])
        out[f"{clock}_total"] = np.bincount(path, weights=total, minlength=n_paths)
        out[f"{clock}_self"] = np.bincount(path, weights=total - called[nodes], minlength=n_paths)
    return out


def _backward_sums(times: dict[str, np.ndarray], nodes: np.ndarray, path: np.ndarray,
                   parents: np.ndarray) -> dict[str, np.ndarray]:
    """Per path, the backward figures of the autograd ``nodes`` mapped to it (total: with the
    paths below it)."""
    n = len(parents)
    out: dict[str, np.ndarray] = {"calls": np.bincount(path, minlength=n).astype(np.float64)}
    for clock in ("host", "device"):
        out[f"{clock}_self"] = np.bincount(path, weights=times[f"{clock}_total"][nodes],
                                           minlength=n)
        out[f"{clock}_total"] = _subtree_sums(out[f"{clock}_self"], parents)
    return out


def _row(p: int, names: list[tuple[str, str]], parents: np.ndarray, fwd: dict[str, np.ndarray],
         bwd: dict[str, np.ndarray], clock: str, step_us: float) -> ModuleRow:
    total = fwd[f"{clock}_total"][p] + bwd[f"{clock}_total"][p]
    return ModuleRow(
        name=names[p][1], path=names[p][0], depth=0, parent=int(parents[p]),
        calls=int(fwd["calls"][p]),
        host_self_us=float(max(fwd["host_self"][p], 0.0)),
        host_total_us=float(fwd["host_total"][p]),
        device_self_us=float(max(fwd["device_self"][p], 0.0)),
        device_total_us=float(fwd["device_total"][p]),
        backward_calls=int(bwd["calls"][p]),
        backward_host_self_us=float(bwd["host_self"][p]),
        backward_host_total_us=float(bwd["host_total"][p]),
        backward_device_self_us=float(bwd["device_self"][p]),
        backward_device_total_us=float(bwd["device_total"][p]),
        share_pct=float(total / step_us * 100.0) if step_us > 0 else 0.0,
    )


def _module_nodes(trace: Trace, tree: CallTree) -> np.ndarray:
    ev = trace.events
    named = np.array([s.startswith(MODULE_PREFIX) for s in ev.names], dtype=bool)
    return (ev.kind[tree.event] == Kind.PYTHON) & named[ev.name[tree.event]]


def _paths(trace: Trace, tree: CallTree, nodes: np.ndarray,
           parent_module: np.ndarray) -> tuple[np.ndarray, list[tuple[str, str]], np.ndarray]:
    """Path index of every node (module nodes only are meaningful), each path's (path, name)
    and its parent path. Nodes come in depth-first order, so a parent's path exists first."""
    ev = trace.events
    path_of_node = np.full(len(tree), -1, dtype=np.int64)
    index: dict[tuple[int, str], int] = {}
    names: list[tuple[str, str]] = []
    parents: list[int] = []
    labels = [ev.names[i].removeprefix(MODULE_PREFIX) for i in ev.name[tree.event[nodes]]]
    for node, up, label in zip(nodes.tolist(), parent_module.tolist(), labels, strict=True):
        parent_path = int(path_of_node[up]) if up >= 0 else -1
        key = (parent_path, label)
        p = index.get(key)
        if p is None:
            p = index[key] = len(names)
            prefix = names[parent_path][0] + _SEPARATOR if parent_path >= 0 else ""
            names.append((prefix + label, label))
            parents.append(parent_path)
        path_of_node[node] = p
    return path_of_node, names, np.array(parents, dtype=np.int64)


def _in_steps(ts: np.ndarray, steps: StepWindows) -> np.ndarray:
    """Which start times fall inside a step window."""
    if not len(steps):
        return np.ones(len(ts), dtype=bool)
    i = np.searchsorted(steps.starts, ts, side="right") - 1
    ok = i >= 0
    ok[ok] &= ts[ok] < steps.ends[i[ok]]
    return ok


def _subtree_sums(values: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Each path's value plus its descendants' (children come after their parent)."""
    out = values.astype(np.float64).copy()
    for p in range(len(parents) - 1, -1, -1):
        if parents[p] >= 0:
            out[parents[p]] += out[p]
    return out


def _kept(rows: list[ModuleRow], keep: list[int]) -> tuple[list[ModuleRow], np.ndarray]:
    """The rows with calls in the steps (their ancestors too), parent indices renumbered."""
    wanted = set(keep)
    for i in keep:
        p = rows[i].parent
        while p >= 0 and p not in wanted:
            wanted.add(p)
            p = rows[p].parent
    order = sorted(wanted)
    remap = np.full(len(rows), -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    out = []
    for i in order:
        r = rows[i]
        r.parent = int(remap[r.parent]) if r.parent >= 0 else -1
        out.append(r)
    return out, remap


def _op_owner(tree: CallTree, module_of: np.ndarray, bwd_nodes: np.ndarray,
              bwd_module: np.ndarray) -> np.ndarray:
    """The module node each node's time belongs to: its innermost module, or inside a backward
    node, the module whose forward that node differentiates."""
    if not len(bwd_nodes):
        return module_of
    up = enclosing(tree, bwd_nodes)
    return np.where(up >= 0, bwd_module[np.maximum(up, 0)], module_of)


def _op_time(trace: Trace, tree: CallTree, value: np.ndarray, owner: np.ndarray,
             path: np.ndarray, remap: np.ndarray,
             inside: np.ndarray) -> dict[tuple[int, str], dict[int, float]]:
    """Per op (name code, name), the self time (``value`` per node) of its calls under each
    module row."""
    ev = trace.events
    ops = np.flatnonzero((ev.kind[tree.event] == Kind.CPU_OP) & ~tree.merged & (owner >= 0)
                         & inside & (value > 0))
    rows = remap[path[ops]]
    ops, rows = ops[rows >= 0], rows[rows >= 0]
    names = canonical_names(ev.names)[ev.name[tree.event[ops]]]
    width = int(rows.max()) + 1 if len(rows) else 1
    keys, group = np.unique(names * width + rows, return_inverse=True)
    sums = np.bincount(group, weights=value[ops], minlength=len(keys))
    out: dict[tuple[int, str], dict[int, float]] = {}
    for key, us in zip(keys.tolist(), sums.tolist(), strict=True):
        out.setdefault((key // width, ev.names[key // width]), {})[key % width] = us
    return out
