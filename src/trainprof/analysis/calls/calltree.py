"""The host call tree: ops, annotations, Python frames and launch calls nested by time per thread.

Built without a Python loop per event. Nodes are sorted by (thread, start, longest first), which
for properly nested ranges is a depth-first order, so a node's descendants are the contiguous
run of nodes that start before it ends (one ``searchsorted``). A node's depth is how many earlier
runs still cover it, and its parent is the last earlier node one level up. Launch and runtime
calls are leaves owned by the op whose External id they carry (the plugin's rule; the enclosing
op when the id is missing or matches no op). As in the plugin and ``torch.profiler``, an op
whose only child is an op of the same name is folded into that child's parent.
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis.calls.cache import per_trace
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.sorting import stable_argsort
from trainprof.trace.model import CALL_TREE_KINDS, LAUNCH_KINDS, Events, Kind, Trace

#: Nodes whose parent is repaired one by one when ranges overlap (see _adopt_orphans); a trace
#: with more than this many is badly broken, and the rest stay at the top of their thread.
MAX_ORPHANS = 10_000


class CallTree(msgspec.Struct):
    """Nodes in depth-first order; every array below is indexed by node position."""

    event: np.ndarray  # the event index of each node
    parent: np.ndarray  # the innermost enclosing node, -1 at the top of a thread
    end: np.ndarray  # descendants of node i are the nodes i+1 .. end[i]-1
    owner: np.ndarray  # where a node's time is subtracted: its parent, or a launch's op
    merged: np.ndarray  # bool: an op folded into its same-named parent
    rep: np.ndarray  # the node whose figures include this one (itself unless merged)
    node_of: np.ndarray  # indexed by event: its node position, -1 outside the tree

    def __len__(self) -> int:
        return len(self.event)

    def nearest(self, mask: np.ndarray, include_self: bool = True) -> np.ndarray:
        """For each node, the closest ancestor (or itself) where ``mask`` holds, else -1."""
        return nearest_marked(self.parent, mask, include_self)


def nearest_marked(parent: np.ndarray, mask: np.ndarray, include_self: bool = True) -> np.ndarray:
    """Closest marked ancestor(-or-self) in a forest, by pointer jumping (log(depth) passes)."""
    n = len(parent)
    sentinel = n
    up = np.append(np.where(parent < 0, sentinel, parent), sentinel)
    jump = np.where(np.append(mask, True), np.arange(n + 1), up)
    while True:
        nxt = jump[jump]
        if np.array_equal(nxt, jump):
            break
        jump = nxt
    found = jump[:n] if include_self else jump[up[:n]]
    return np.where(found == sentinel, -1, found)


@per_trace
def call_tree(trace: Trace) -> CallTree:
    """The call tree of a trace's host threads (cached on the trace)."""
    ev = trace.events
    idx = np.flatnonzero(ev.of_kind(*CALL_TREE_KINDS))
    launch = ev.of_kind(*LAUNCH_KINDS)[idx]
    order = _tree_order(ev.tid[idx], ev.ts[idx], event_ends(ev)[idx], launch)
    idx, launch = idx[order], launch[order]
    tid, ts, end_ts = ev.tid[idx], ev.ts[idx], event_ends(ev)[idx]
    n = len(idx)
    pos = np.arange(n)

    end = _subtree_ends(tid, ts, end_ts)
    # Depth: earlier nodes of the thread whose run still covers this one.
    # (the number of runs ending at or before each position: a count per end, summed)
    depth = pos - np.cumsum(np.bincount(end, minlength=n + 1))[:n]
    parent = _parents(depth, end)
    _adopt_orphans(parent, depth, end, tid)
    # Launch calls are leaves: a call recorded inside another call hangs off the op around both.
    parent = nearest_marked(parent, ~launch, include_self=False)

    owner = parent.copy()
    owner[launch] = _launch_owners(ev, idx, launch, parent, end)
    merged = _folded(ev, idx, parent, launch)
    rep = nearest_marked(parent, ~merged)
    node_of = np.full(len(ev), -1, dtype=np.int64)
    node_of[idx] = pos
    return CallTree(event=idx, parent=parent, end=end, owner=owner, merged=merged, rep=rep,
                    node_of=node_of)


def _tree_order(tid: np.ndarray, ts: np.ndarray, end: np.ndarray,
                launch: np.ndarray) -> np.ndarray:
    """Order by (thread, start); equal starts put the longer range first (it encloses) and a
    launch after an op of the same span. Events come sorted by start, so only ties are sorted."""
    order = stable_argsort(tid)
    t, s = tid[order], ts[order]
    tie = np.flatnonzero((t[1:] == t[:-1]) & (s[1:] == s[:-1]))
    if len(tie):
        members = np.unique(np.concatenate([tie, tie + 1]))
        run = np.cumsum(np.r_[True, (np.diff(members) > 1) | (s[members[1:]] != s[members[:-1]])])
        sub = order[members]
        order[members] = sub[np.lexsort((launch[sub], -end[sub], run))]
    return order


def _subtree_ends(tid: np.ndarray, ts: np.ndarray, end_ts: np.ndarray) -> np.ndarray:
    """One past the last descendant: the first node of the thread starting at or after the end."""
    end = np.empty(len(tid), dtype=np.int64)
    bounds = np.flatnonzero(np.diff(tid)) + 1
    for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(tid)], strict=True):  # one per thread
        end[a:b] = a + np.searchsorted(ts[a:b], end_ts[a:b], side="left")
    return np.maximum(end, np.arange(len(tid)) + 1)


def _parents(depth: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The last earlier node one level up, if its run covers the node."""
    n = len(depth)
    if not n:
        return np.empty(0, dtype=np.int64)
    # Nodes by (depth, position); queried in that same order, so the search runs sorted.
    by_key = stable_argsort(depth)
    d = depth[by_key]
    key = d * (n + 1) + by_key
    # A node right after a node one level up (a first child) finds that one: no search.
    after_up = np.zeros(n, dtype=bool)
    after_up[1:] = depth[:-1] == depth[1:] - 1
    after_up = after_up[by_key]
    cand = by_key - 1
    found = np.ones(n, dtype=bool)
    rest = np.flatnonzero(~after_up)
    hit = np.searchsorted(key, key[rest] - (n + 1), side="left") - 1
    cand[rest] = by_key[np.maximum(hit, 0)]
    found[rest] = hit >= 0
    ok = (d > 0) & found & (depth[cand] == d - 1) & (end[cand] > by_key)
    parent = np.empty(n, dtype=np.int64)
    parent[by_key] = np.where(ok, cand, -1)
    return parent


def _adopt_orphans(parent: np.ndarray, depth: np.ndarray, end: np.ndarray,
                   tid: np.ndarray) -> None:
    """Give a parent to the few nodes that lost it to a range overlapping its parent's end
    (clock rounding, or a step starting inside a Python frame): the innermost covering node."""
    orphans = np.flatnonzero((depth > 0) & (parent < 0))
    if len(orphans) > MAX_ORPHANS:
        orphans = orphans[:MAX_ORPHANS]
    for i in orphans:  # rare: a handful per trace
        first = int(np.searchsorted(tid, tid[i], side="left"))
        covering = np.flatnonzero(end[first:i] > i)
        if len(covering):
            parent[i] = first + covering[-1]


def _launch_owners(ev: Events, idx: np.ndarray, launch: np.ndarray, parent: np.ndarray,
                   end: np.ndarray) -> np.ndarray:
    """The node with a launch's External id (ops and annotations) when it encloses the launch;
    else the enclosing node. Some traces (PyTorch 2.1's backward thread) carry stale ids."""
    ext = ev.external_id[idx]
    targets = np.flatnonzero(~launch & (ext > 0))
    owners = parent[launch]
    if not len(targets):
        return owners
    t_ext, first = np.unique(ext[targets], return_index=True)
    targets = targets[first]
    wanted = ext[launch]
    hit = np.minimum(np.searchsorted(t_ext, wanted), len(t_ext) - 1)
    cand = targets[hit]
    where = np.flatnonzero(launch)
    found = (wanted > 0) & (t_ext[hit] == wanted) & (cand < where) & (end[cand] > where)
    return np.where(found, cand, owners)


def _folded(ev: Events, idx: np.ndarray, parent: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """Ops that are the only child of an op with the same name (torch's _remove_dup_nodes)."""
    n = len(idx)
    if not n:
        return np.zeros(0, dtype=bool)
    is_op = ev.kind[idx] == Kind.CPU_OP
    has_parent = (parent >= 0) & ~launch
    children = np.bincount(parent[has_parent], minlength=n)
    canonical = canonical_names(ev.names)
    name = canonical[ev.name[idx]]
    p = np.maximum(parent, 0)
    return has_parent & is_op & is_op[p] & (children[p] == 1) & (name == name[p])


def canonical_names(names: list[str]) -> np.ndarray:
    """Index of the first occurrence of each name string (a name may repeat across categories)."""
    first: dict[str, int] = {}
    return np.array([first.setdefault(s, i) for i, s in enumerate(names)], dtype=np.int64)
