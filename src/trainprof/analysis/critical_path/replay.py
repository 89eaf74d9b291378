"""Replaying a step graph: when each point happens, given the edges' weights.

A point happens at the latest of its anchor, its chain predecessor plus the chain edge's weight,
and each cross edge's source plus its lag. Along a chain that is a running maximum:
``t[i] = C[i] + max_{j<=i}(x[j] - C[j])`` with ``C`` the chain's cumulative weights and ``x`` the
point's other inputs, so one pass over every chain at once is a few NumPy calls. Cross edges are
then re-read and the pass repeated until nothing moves; on a DAG that takes as many passes as the
most cross edges on one path (each sync is a round trip host -> device -> host), a handful in a
training step. The critical path is read back by following each point's binding input.
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis.critical_path.graph import UNREACHED, StepGraph

#: Passes after which a replay stops even if points still move (a graph this deep is unlikely:
#: it would need about this many syncs in one step); the result then notes it.
MAX_PASSES = 2_000


def _chain_scan(g: StepGraph, weight: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Times along every chain given the chain weights and the other inputs ``x``."""
    if not len(x):
        return x.copy()
    head = g.heads
    cs = np.cumsum(weight)
    head_pos = np.maximum.accumulate(np.where(head, np.arange(len(x)), 0))
    c = cs - cs[head_pos]  # cumulative weight from the chain's head (weights at heads are 0)
    reached = x > UNREACHED
    y = np.where(reached, x - c, 0)
    lo = int(y[reached].min()) - 1 if reached.any() else -1
    y = np.where(reached, y, lo)
    stride = int(y.max()) - lo + 1
    offset = np.cumsum(head) * np.int64(stride)  # keeps each chain's running max to itself
    run = np.maximum.accumulate(y + offset) - offset
    return np.where(run > lo, c + run, UNREACHED)


def replay(g: StepGraph, weight: np.ndarray | None = None,
           start: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """(time of every point, converged) with these chain weights (the graph's own by default),
    iterating from ``start`` (any times; the recorded ones or an earlier replay converge
    fastest)."""
    w = g.weight if weight is None else weight
    t = _chain_scan(g, w, g.anchor) if start is None else start
    ok_src = np.ones(len(g.src), dtype=bool)
    for _ in range(MAX_PASSES):
        x = g.anchor.copy()
        ok_src = t[g.src] > UNREACHED
        np.maximum.at(x, g.dst[ok_src], t[g.src[ok_src]] + g.lag[ok_src])
        nxt = _chain_scan(g, w, x)
        if np.array_equal(nxt, t):
            return t, True
        t = nxt
    return t, False


def step_ends(g: StepGraph, t: np.ndarray) -> np.ndarray:
    """The latest point of each step (ns), UNREACHED for a step without points."""
    out = np.full(len(g.step_start), UNREACHED, dtype=np.int64)
    np.maximum.at(out, g.chain_step[g.chain], t)
    return out


def binding_inputs(g: StepGraph, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point, what set its time: (-1, -1) an anchor; (previous point, -1) its chain edge;
    (source point, edge) a cross edge. Chain edges win ties."""
    n = len(t)
    pred = np.full(n, -1, dtype=np.int64)
    via = np.full(n, -1, dtype=np.int64)
    arrive = t[g.src] + g.lag
    hit = (t[g.src] > UNREACHED) & (arrive == t[g.dst])
    edges = np.flatnonzero(hit)
    pred[g.dst[edges]] = g.src[edges]
    via[g.dst[edges]] = edges
    prev = np.r_[-1, np.arange(n - 1)]
    by_chain = ~g.heads & (t[np.maximum(prev, 0)] + g.weight == t) & (t > UNREACHED)
    pred[by_chain], via[by_chain] = prev[by_chain], -1
    return pred, via


def walk_back(pred: np.ndarray, end: int) -> list[int]:
    """The points from ``end`` back to the anchor that started it, in time order."""
    chain = pred.tolist()
    path = [end]
    p = chain[end]
    while p >= 0 and len(path) <= len(chain):  # a cycle (clock skew) cannot trap the walk
        path.append(p)
        p = chain[p]
    path.reverse()
    return path
