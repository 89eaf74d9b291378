"""Backward work back to its module, through the forward-backward (``fwdbwd``) flows.

Each ``fwdbwd`` flow starts on a forward op (at its start, on its thread) and ends on the
autograd node that computes that op's gradient (``AddmmBackward0``). The forward op's innermost
module owns the node: its host time and the kernels launched under it.
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis.calls.calltree import CallTree
from trainprof.analysis.event_columns import event_ends
from trainprof.trace.model import Trace


def backward_nodes(trace: Trace, tree: CallTree,
                   module_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(call-tree node of each mapped autograd node, the forward module node it belongs to).
    A node inside another mapped node is left out (its time is in the outer one)."""
    none = np.empty(0, dtype=np.int64)
    flows = trace.flows
    if not len(flows) or not len(tree):
        return none, none
    fb = flows.forward_backward & np.isfinite(flows.ts)
    start = _first_by_id(flows.id, fb & (flows.phase == 0))
    finish = _first_by_id(flows.id, fb & (flows.phase == 1))
    ids = np.intersect1d(flows.id[start], flows.id[finish])
    if not len(ids):
        return none, none
    start = start[np.searchsorted(flows.id[start], ids)]
    finish = finish[np.searchsorted(flows.id[finish], ids)]
    both = np.concatenate([start, finish])
    fwd_node, bwd_node = np.split(node_at(trace, tree, flows.tid[both], flows.ts[both]), 2)
    module = np.where(fwd_node >= 0, module_of[np.maximum(fwd_node, 0)], -1)
    ok = (module >= 0) & (bwd_node >= 0)
    bwd_node, module = bwd_node[ok], module[ok]
    bwd_node, first = np.unique(bwd_node, return_index=True)  # sorted: depth-first order
    module = module[first]
    # Inside an earlier mapped node when one of those ends past it (depth-first positions).
    reach = np.maximum.accumulate(tree.end[bwd_node])
    outer = np.ones(len(bwd_node), dtype=bool)
    outer[1:] = reach[:-1] <= bwd_node[1:]
    return bwd_node[outer], module[outer]


def enclosing(tree: CallTree, nodes: np.ndarray) -> np.ndarray:
    """For every call-tree node, the position in ``nodes`` (sorted, none inside another) of the
    one that encloses it or is it, else -1."""
    pos = np.searchsorted(nodes, np.arange(len(tree)), side="right") - 1
    ok = pos >= 0
    ok[ok] &= tree.end[nodes[pos[ok]]] > np.flatnonzero(ok)
    return np.where(ok, pos, -1)


def _first_by_id(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Positions of the first flow event of each id among ``mask``, sorted by id."""
    pos = np.flatnonzero(mask)
    order = np.argsort(ids[pos], kind="stable")
    pos = pos[order]
    _, first = np.unique(ids[pos], return_index=True)
    return pos[first]


def node_at(trace: Trace, tree: CallTree, tid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The innermost call-tree node open at each (thread, moment), or -1. A node counts as
    open at its own start even when it lasts zero time."""
    ev = trace.events
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(tree) or not len(ts):
        return out
    node_tid = ev.tid[tree.event].astype(np.float64)
    node_ts = ev.ts[tree.event]
    node_end = event_ends(ev)[tree.event]
    unit = float(max(node_end.max(), ts.max()) - min(node_ts.min(), ts.min())) + 1.0
    key = node_tid * unit + node_ts
    pos = np.searchsorted(key, tid.astype(np.float64) * unit + ts, side="right") - 1
    pos[(pos >= 0) & (node_tid[np.maximum(pos, 0)] != tid)] = -1
    while True:  # up the tree until the node is still open at the moment (depth passes)
        p = np.maximum(pos, 0)
        closed = (pos >= 0) & (node_end[p] <= ts) & (node_ts[p] != ts)
        if not closed.any():
            return pos
        pos[closed] = tree.parent[pos[closed]]
