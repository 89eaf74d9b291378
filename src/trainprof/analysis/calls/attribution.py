"""Which host call launched each device event, and which op that call belongs to.

Device event -> launch call by correlation id, or, when the device event carries none, by its
``ac2g`` flow (the flow's end sits on the device event, its start on the launch call). Launch
call -> op through the call tree (External id, else the enclosing op).
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis.calls.cache import per_trace
from trainprof.analysis.calls.calltree import call_tree
from trainprof.analysis.overview.steps import launch_links
from trainprof.trace.model import DEVICE_KINDS, LAUNCH_KINDS, Kind, Trace


class DeviceLinks(msgspec.Struct):
    """Per device event (kernel, memcpy, memset), in event order."""

    device: np.ndarray  # event index of each device event
    launch: np.ndarray  # event index of the call that launched it, -1 when unknown
    owner: np.ndarray  # call-tree node the device time is reported under (folded ops resolved)
    op: np.ndarray  # call-tree node of the innermost CPU op around the launch, -1 when none

    def __len__(self) -> int:
        return len(self.device)


@per_trace
def device_links(trace: Trace) -> DeviceLinks:
    """Launch call and op of every device event (cached on the trace)."""
    ev = trace.events
    device = np.flatnonzero(ev.of_kind(*DEVICE_KINDS))
    launch = np.full(len(ev), -1, dtype=np.int64)
    dev_idx, launch_idx = launch_links(trace)
    launch[dev_idx] = launch_idx
    launch = launch[device]
    missing = launch < 0
    if missing.any() and len(trace.flows):
        launch[missing] = _launches_by_flow(trace, device[missing])

    tree = call_tree(trace)
    none = np.full(len(device), -1, dtype=np.int64)
    if not len(tree):
        return DeviceLinks(device=device, launch=launch, owner=none, op=none.copy())
    node = _lookup(tree.node_of, launch)
    owner = _lookup(tree.rep, _lookup(tree.owner, node))
    op = _lookup(tree.nearest(ev.kind[tree.event] == Kind.CPU_OP), owner)
    return DeviceLinks(device=device, launch=launch, owner=owner, op=op)


def _lookup(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``table[keys]`` where keys >= 0, -1 elsewhere."""
    return np.where(keys >= 0, table[np.maximum(keys, 0)], -1)


def _launches_by_flow(trace: Trace, device: np.ndarray) -> np.ndarray:
    """The launch call at the start of the ac2g flow that ends on each device event, or -1."""
    ev, fl = trace.events, trace.flows
    launch_flow = ~fl.forward_backward
    ends = {(int(t), float(s)): int(i) for t, s, i in zip(
        fl.tid[launch_flow & (fl.phase == 1)], fl.ts[launch_flow & (fl.phase == 1)],
        fl.id[launch_flow & (fl.phase == 1)], strict=True)}
    starts = launch_flow & (fl.phase == 0)
    start_of = dict(zip(fl.id[starts].tolist(), zip(fl.tid[starts].tolist(),
                                                    fl.ts[starts].tolist(), strict=True),
                        strict=True))
    launches = np.flatnonzero(ev.of_kind(*LAUNCH_KINDS))
    l_ts = ev.ts[launches]
    out = np.full(len(device), -1, dtype=np.int64)
    for k, d in enumerate(device):  # only device events without a correlation id
        flow = ends.get((int(ev.tid[d]), float(ev.ts[d])))
        start = start_of.get(flow) if flow is not None else None
        if start is None:
            continue
        lo, hi = np.searchsorted(l_ts, start[1], "left"), np.searchsorted(l_ts, start[1], "right")
        same = launches[lo:hi][ev.tid[launches[lo:hi]] == start[0]]
        if len(same):
            out[k] = same[0]
    return out
