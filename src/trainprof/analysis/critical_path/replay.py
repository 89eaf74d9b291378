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

from collections import deque
from functools import cached_property

import numpy as np

from trainprof.analysis.critical_path.graph import UNREACHED, StepGraph, index_dtype
from trainprof.analysis.critical_path.runs import LaunchRuns, launch_runs

#: Passes after which a replay stops even if points still move (a graph this deep is unlikely:
#: it would need about this many syncs in one step); the result then notes it.
MAX_PASSES = 2_000
#: Chains up to this many are scanned one by one (a running maximum each): cheaper than one
#: pass over every chain at once, which must first lift each chain's times above the last's.
CHAINS_ONE_BY_ONE = 256


class _Chains:
    """What a scan along every chain needs that depends on the chains and weights only (one
    replay scans many times with the same weights)."""

    def __init__(self, g: StepGraph, weight: np.ndarray) -> None:
        head = g.heads
        first = np.flatnonzero(head)
        self.chains = len(first)
        self.bounds = np.r_[first, len(head)]
        self._head = head
        cs = np.cumsum(weight)
        # Cumulative weight from the chain's head (weights at heads are 0).
        self.c = cs - np.repeat(cs[first], np.diff(self.bounds))

    @cached_property
    def number(self) -> np.ndarray:
        """Each point's chain, counted from 1."""
        return np.cumsum(self._head, dtype=np.int64)


def _chain_scan(ch: _Chains, x: np.ndarray) -> np.ndarray:
    """Times along every chain given the chains' weights (``ch``) and the other inputs ``x``."""
    if not len(x):
        return x.copy()
    reached = x > UNREACHED
    y = x - ch.c
    lo = int(np.min(y, where=reached, initial=np.iinfo(np.int64).max)) - 1 \
        if reached.any() else -1
    np.putmask(y, ~reached, lo)
    del reached
    stride = int(y.max()) - lo + 1
    if ch.chains > CHAINS_ONE_BY_ONE and stride * (ch.chains + 1) + abs(lo) < 2**62:
        offset = ch.number * np.int64(stride)  # keeps each chain's running max to itself
        y += offset
        np.maximum.accumulate(y, out=y)
        y -= offset
        del offset
    else:  # a few chains, or times too far apart for one pass: chain by chain
        bounds = ch.bounds.tolist()
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            np.maximum.accumulate(y[a:b], out=y[a:b])
    unreached = y <= lo
    y += ch.c
    y[unreached] = UNREACHED
    return y


def replay(g: StepGraph, weight: np.ndarray | None = None,
           start: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """(time of every point, converged) with these chain weights (the graph's own by default),
    iterating from ``start`` (any times; the recorded ones or an earlier replay converge
    fastest)."""
    ch = _Chains(g, g.weight if weight is None else weight)
    t = _chain_scan(ch, g.anchor) if start is None else start
    for _ in range(MAX_PASSES):
        x = g.anchor.copy()
        ok_src = t[g.src] > UNREACHED
        np.maximum.at(x, g.dst[ok_src], t[g.src[ok_src]] + g.lag[ok_src])
        nxt = _chain_scan(ch, x)
        del x
        if np.array_equal(nxt, t):
            return t, True
        t = nxt
    return t, False


def step_ends(g: StepGraph, t: np.ndarray) -> np.ndarray:
    """The latest point of each step (ns), UNREACHED for a step without points."""
    out = np.full(len(g.step_start), UNREACHED, dtype=np.int64)
    if not len(t):
        return out
    # Each chain's latest (its points are contiguous), then each step's of its chains.
    firsts = np.flatnonzero(g.heads)
    np.maximum.at(out, g.chain_step[g.chain[firsts]], np.maximum.reduceat(t, firsts))
    return out


def binding_inputs(g: StepGraph, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point, what set its time: (-1, -1) an anchor; (previous point, -1) its chain edge;
    (source point, edge) a cross edge. Chain edges win ties."""
    n = len(t)
    pred = np.full(n, -1, dtype=index_dtype(n))
    via = np.full(n, -1, dtype=index_dtype(len(g.src)))
    if not n:
        return pred, via
    arrive = t[g.src] + g.lag
    hit = (t[g.src] > UNREACHED) & (arrive == t[g.dst])
    edges = np.flatnonzero(hit)
    pred[g.dst[edges]] = g.src[edges]
    via[g.dst[edges]] = edges
    by_chain = np.zeros(n, dtype=bool)  # the previous point on the chain plus the edge
    by_chain[1:] = t[:-1] + g.weight[1:] == t[1:]
    by_chain &= ~g.heads & (t > UNREACHED)
    np.copyto(pred, np.arange(-1, n - 1, dtype=pred.dtype), where=by_chain)
    via[by_chain] = -1
    return pred, via


class PathWalker:
    """Reads critical paths back from the binding inputs, a run of chain edges at a time."""

    def __init__(self, pred: np.ndarray) -> None:
        n = len(pred)
        # The first point of the run of chain-bound points that ends at each point.
        starts_run = np.ones(n, dtype=bool)  # not bound by its chain edge
        starts_run[1:] = pred[1:] != np.arange(n - 1, dtype=pred.dtype)
        marks = np.flatnonzero(starts_run).astype(index_dtype(n))
        del starts_run
        run_start = np.repeat(marks, np.diff(np.r_[marks, n]))
        del marks
        # Memoryviews read back Python ints as fast as lists, at 4 bytes a point, not ~36.
        self._run_start = as_view(run_start)
        self._pred = as_view(np.ascontiguousarray(pred))

    def path(self, end: int) -> np.ndarray:
        """The points from ``end`` back to the anchor that started it, in time order."""
        runs = []
        p, guard = end, len(self._pred)
        while p >= 0 and guard > 0:  # a cycle (clock skew) cannot trap the walk
            q = self._run_start[p]
            runs.append(np.arange(q, p + 1))
            p = self._pred[q]
            guard -= 1
        return np.concatenate(runs[::-1]) if runs else np.zeros(0, dtype=np.int64)


def _topological(n: int, src: np.ndarray, dst: np.ndarray, start: np.ndarray) -> np.ndarray:
    """A topological order of n nodes (Kahn's algorithm, seeded in ``start`` order); nodes
    left in a cycle (clock skew can close one) follow in ``start`` order."""
    rank = np.empty(n, dtype=np.int64)
    rank[start] = np.arange(n)
    if (rank[src] < rank[dst]).all():  # the usual case: time order is already one
        return start
    indegree = np.bincount(dst, minlength=n).tolist()
    by_src = np.argsort(src, kind="stable")
    bounds = np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
    targets = dst[by_src].tolist()
    ready = deque(i for i in start.tolist() if indegree[i] == 0)
    out = []
    while ready:
        i = ready.popleft()
        out.append(i)
        for j in targets[bounds[i]:bounds[i + 1]]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if len(out) < n:
        seen = np.zeros(n, dtype=bool)
        seen[out] = True
        out += [i for i in start.tolist() if not seen[i]]
    return np.array(out, dtype=np.int64)


class WhatIfReplay:
    """Fast replays of one graph with changed chain weights, for the what-if table.

    Along a chain, a point's time is its previous point's plus the edge's weight unless a cross
    edge or an anchor reaches it. So the replay visits only those points and the chains' last
    points (a step ends at one of those), once each in a topological order, summing the chain
    weights in between; a cross edge leaving from a point not visited leaves, in effect, from
    the visited point before it on its chain plus the weights between. A deep graph (hundreds of
    blocking copies or collectives a step, each a hop between chains) then costs one visit per
    point rather than one pass over the graph per hop. Visits repeat only if clock skew closed
    a cycle.
    """

    def __init__(self, g: StepGraph, t: np.ndarray, steps: np.ndarray | None = None) -> None:
        """``t``: the graph's replayed times (``replay``), which seed the visiting order;
        ``steps``: mask of the steps to replay (all by default); the others stay unreached."""
        self.g = g
        n = len(g.time)
        heads = g.heads
        tails = np.r_[heads[1:], True] if n else heads
        visit = heads | tails | (g.anchor > UNREACHED)
        visit[g.dst] = True
        inside = np.ones(len(g.dst), dtype=bool)
        if steps is not None and not steps.all():
            chain_in = steps[g.chain_step]  # per chain, not per point
            visit &= chain_in[g.chain]
            inside = chain_in[g.chain[g.dst]]
        kept = np.flatnonzero(visit)
        # Each point's latest visited point (or head) at or before it, on its chain (the
        # first point is a head).
        marks = np.flatnonzero(visit | heads)
        del visit, tails
        base = np.repeat(marks, np.diff(np.r_[marks, n]))
        del marks
        prev_in_chain = np.where(heads[kept], -1, np.r_[-1, kept[:-1]])
        index = np.full(n, -1, dtype=np.int64)
        index[kept] = np.arange(len(kept))
        linked = prev_in_chain >= 0
        cross_from = g.src[inside]  # the point each cross edge leaves from ...
        cross_base = base[cross_from]  # ... and the visited point before it
        del base
        src = np.r_[index[prev_in_chain[linked]], index[cross_base]]
        dst = np.r_[np.flatnonzero(linked), index[g.dst[inside]]]
        del index, heads
        order = _topological(len(kept), src, dst, np.lexsort((kept, t[kept])))
        rank = np.empty(len(kept), dtype=np.int64)
        rank[order] = np.arange(len(kept))
        points = kept[order]
        edge_dst = rank[dst]
        self._by_dst = np.argsort(edge_dst, kind="stable")
        self._dst_array = edge_dst[self._by_dst]
        self._src_array = rank[src][self._by_dst]
        self._anchor_array = g.anchor[points]
        self.step = g.chain_step[g.chain[points]]
        # Edges back (source visited after destination: only inside a cycle, clock skew).
        back = self._src_array > self._dst_array
        self._back = (self._src_array[back], self._dst_array[back], np.flatnonzero(back))
        # The unchanged replay: a what-if recomputes each step from its first changed edge on.
        self._edge_dst = self._dst_array
        self._edge_step = self.step[self._edge_dst]
        # Each edge's lag is its own (a cross edge's) plus the chain weights after point
        # ``_lag_b`` up to point ``_lag_a`` (chain edges: visited point and its predecessor;
        # cross edges: the point left from and the visited point before it), in build order.
        lag_a = np.r_[kept[linked], cross_from]
        lag_b = np.r_[prev_in_chain[linked], cross_base]
        del cross_from, cross_base
        cs = np.cumsum(g.weight)  # the graph's cumulative weights
        own = np.r_[np.zeros(int(linked.sum()), dtype=np.int64), g.lag[inside]]
        self._base_lags = ((cs[lag_a] - cs[lag_b]) + own)[self._by_dst]
        del cs, own
        self._lag_a: np.ndarray = lag_a[self._by_dst]  # by destination, as the lags
        self._lag_b: np.ndarray = lag_b[self._by_dst]
        self._base_times = np.maximum(t[points], UNREACHED)
        self._clean = not len(self._back[0])
        self._runs: LaunchRuns | None = None
        if self._clean and bool((g.weight >= 0).all()):
            sorted_at = np.empty(len(self._by_dst), dtype=np.int64)
            sorted_at[self._by_dst] = np.arange(len(self._by_dst))
            n_chain = int(linked.sum())
            self._runs = launch_runs(linked, dst[n_chain:], src[n_chain:],
                                     g.anchor[kept] > UNREACHED, rank, sorted_at)
            del sorted_at
        if self._runs is not None:
            # The edges a replay visits with the runs folded: those not into a run, and two
            # into each run's last point, by destination in visiting order.
            runs = self._runs
            fold_dst = np.r_[self._dst_array[runs.kept_edges], runs.end, runs.end]
            fold_src = np.r_[self._src_array[runs.kept_edges], runs.before, runs.source]
            self._fold_order = np.argsort(fold_dst, kind="stable")
            self._fold_dst = fold_dst[self._fold_order]
            self._fold_src = fold_src[self._fold_order]
            self._fold_step = self.step[self._fold_dst]
            timed = np.ones(len(points), dtype=bool)
            timed[runs.inner] = False
            self._timed = np.flatnonzero(timed)  # the points with a time of their own
            # ... grouped by step: a step's end is the max over its group (a reduceat, not a
            # ``maximum.at`` per what-if).
            by_step = self._timed[np.argsort(self.step[self._timed], kind="stable")]
            steps = self.step[by_step]
            bounds = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]]) if len(steps) else \
                np.zeros(0, dtype=np.int64)
            self._timed_groups = (by_step, bounds, steps[bounds])

    def reads(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the two points each edge's lag is read between fall among the sorted points
        ``pos`` (by destination): what ``changed_step_ends`` needs of ``pos`` whatever the
        weights there, found once for the what-ifs that change the same points."""
        # How many of ``pos`` are at or before each point (``searchsorted``, side right, of
        # every point at once): a count per point, summed.
        at_or_before = np.bincount(pos, minlength=len(self.g.time))
        np.cumsum(at_or_before, out=at_or_before)
        return at_or_before[self._lag_a], at_or_before[self._lag_b]

    def _lag_changes(self, pos: np.ndarray, weight: np.ndarray,
                     reads: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """How much every edge's lag changes (by destination) with these weights at ``pos``
        (``reads``: ``self.reads(pos)``)."""
        # The changes summed up to each point read (a what-if changes a few weights: no
        # cumulative sum over every point).
        shift = np.r_[0, np.cumsum(weight - self.g.weight[pos])]
        return shift[reads[0]] - shift[reads[1]]

    def step_ends(self, weight: np.ndarray, max_rounds: int = 8) -> np.ndarray:
        """The latest time of each step (ns) with these chain weights."""
        pos = np.flatnonzero(weight != self.g.weight)
        return self.changed_step_ends(pos, weight[pos], max_rounds)

    def changed_step_ends(self, pos: np.ndarray, weight: np.ndarray, max_rounds: int = 8,
                          reads: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """``step_ends`` with the graph's weights but at the points ``pos`` (sorted), whose
        weights are ``weight``: no copy of every weight for a what-if that changes a few.
        ``reads``: ``self.reads(pos)``, when already found."""
        change = self._lag_changes(pos, weight, self.reads(pos) if reads is None else reads)
        sorted_lags = self._base_lags + change
        if self._runs is not None and bool((weight >= 0).all()):
            return self._folded_step_ends(sorted_lags, change != 0)
        if not self._clean:
            dst, src, lags = self._dst_array, self._src_array, sorted_lags
            times = self._anchor_array.copy()
        else:  # start each step at its first changed edge: what precedes is as it was
            changed = change != 0
            first = np.full(len(self.g.step_start), len(self._anchor_array), dtype=np.int64)
            np.minimum.at(first, self._edge_step[changed], self._edge_dst[changed])
            redo = self._edge_dst >= first[self._edge_step]
            times = self._base_times.copy()
            times[self._edge_dst[redo]] = self._anchor_array[self._edge_dst[redo]]
            dst, src, lags = self._dst_array[redo], self._src_array[redo], sorted_lags[redo]
        # Memoryviews: Python ints read and written in place, without a list of them each.
        t = as_view(times)
        dst_v, src_v, lag_v = (as_view(np.ascontiguousarray(a, dtype=np.int64))
                               for a in (dst, src, lags))
        back_src, back_dst, back_edge = self._back
        for _ in range(max_rounds):
            # Edges by destination in visiting order: every source is final when read.
            for d, s, lag in zip(dst_v, src_v, lag_v, strict=True):
                v = t[s] + lag
                if v > t[d]:
                    t[d] = v
            if not (times[back_src] + sorted_lags[back_edge] > times[back_dst]).any():
                break
        out = np.full(len(self.g.step_start), UNREACHED, dtype=np.int64)
        np.maximum.at(out, self.step, np.maximum(times, UNREACHED))
        return out


    def _folded_step_ends(self, lags: np.ndarray, changed: np.ndarray) -> np.ndarray:
        """``changed_step_ends`` over the graph with its runs folded (``runs.py``), from every
        edge's ``lags`` and whether it ``changed``, by destination: no cycle, no negative
        weight."""
        runs = self._runs
        assert runs is not None
        run_lags, touched = runs.folded(lags, changed)
        kept = runs.kept_edges
        lags = np.r_[lags[kept], run_lags[0], run_lags[1]][self._fold_order]
        changed = np.r_[changed[kept], touched, touched][self._fold_order]
        anchor = self._anchor_array.copy()
        anchor[runs.end] = run_lags[2]
        # Start each step at its first changed edge: what precedes is as it was.
        first = np.full(len(self.g.step_start), len(anchor), dtype=np.int64)
        np.minimum.at(first, self._fold_step[changed], self._fold_dst[changed])
        redo = self._fold_dst >= first[self._fold_step]
        times = self._base_times.copy()
        times[self._fold_dst[redo]] = anchor[self._fold_dst[redo]]
        t = as_view(times)
        dst_v, src_v, lag_v = (as_view(np.ascontiguousarray(a[redo], dtype=np.int64))
                               for a in (self._fold_dst, self._fold_src, lags))
        for d, s, lag in zip(dst_v, src_v, lag_v, strict=True):
            v = t[s] + lag
            if v > t[d]:
                t[d] = v
        out = np.full(len(self.g.step_start), UNREACHED, dtype=np.int64)
        by_step, bounds, steps = self._timed_groups
        if len(by_step):
            out[steps] = np.maximum(np.maximum.reduceat(times[by_step], bounds), UNREACHED)
        return out


def as_view(a: np.ndarray) -> memoryview:
    """A memoryview of a contiguous array: Python ints read and written in place."""
    return memoryview(a)  # type: ignore[arg-type]  # an ndarray is a buffer; numpy's stubs
    # for Python 3.10 cannot say so (no collections.abc.Buffer before 3.12)
