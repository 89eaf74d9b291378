"""The activity a rank's parallelism figures are measured against: its compute and its
communication over a span, from device kernels on a GPU rank and from host ops on a CPU rank
(where gloo runs the collectives on the host)."""

from __future__ import annotations

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.nesting import HostRanges
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.exposure import span_sets
from trainprof.analysis.overview.steps import launch_links
from trainprof.trace.model import FLAG_COMM, HOST_KINDS, Kind, Trace


def on_device(trace: Trace) -> bool:
    """Whether the rank's compute runs on a device (kernels), rather than on the host."""
    return bool((trace.events.kind == Kind.KERNEL).any())


def compute(trace: Trace, start: float, end: float) -> iv.Intervals:
    """When the rank computes inside ``[start, end)``: any compute kernel on a GPU rank; on a
    CPU rank, any CPU op that is not communication and calls none (an autograd node whose
    hook waits for an all-gather is waiting, not computing: its own children still count)."""
    if on_device(trace):
        return span_sets(trace, start, end).compute
    ev = trace.events
    ends = event_ends(ev)
    cpu = ev.kind == Kind.CPU_OP
    ops = np.flatnonzero(cpu & ~ev.flagged(FLAG_COMM) & (ev.ts < end) & (ends > start))
    calls = np.flatnonzero(cpu & ev.flagged(FLAG_COMM) & (ev.ts < end) & (ends > start))
    keep = np.ones(len(ops), dtype=bool)
    for thread in np.unique(ev.tid[calls]).tolist():
        starts = ev.ts[calls[ev.tid[calls] == thread]]
        mine = ev.tid[ops] == thread
        first = np.searchsorted(starts, ev.ts[ops[mine]], side="left")
        keep[mine] = np.searchsorted(starts, ends[ops[mine]], side="left") == first
    ops = ops[keep]
    return iv.clip(iv.union(ev.ts[ops], ends[ops]), start, end)


def all_comm_events(trace: Trace) -> np.ndarray:
    """Every communication event: kernels, c10d calls, backend ranges."""
    ev = trace.events
    comm = np.flatnonzero(ev.flagged(FLAG_COMM))
    return comm[np.isin(ev.kind[comm], (Kind.KERNEL, *HOST_KINDS))]


def comm_events(trace: Trace) -> np.ndarray:
    """The communication events the rank's figures use: its communication kernels on a GPU
    rank that has some, else its host communication ranges (c10d ops, ``gloo:*`` ranges)."""
    ev = trace.events
    comm = np.flatnonzero(ev.flagged(FLAG_COMM))
    kernels = comm[ev.kind[comm] == Kind.KERNEL]
    if len(kernels):
        return kernels
    return comm[np.isin(ev.kind[comm], tuple(HOST_KINDS))]


def busy(trace: Trace, idx: np.ndarray, start: float, end: float) -> iv.Intervals:
    """The union of events ``idx`` inside ``[start, end)``."""
    ev = trace.events
    return iv.clip(iv.union(ev.ts[idx], event_ends(ev)[idx]), start, end)


def launched_in(trace: Trace, kernels: np.ndarray, hosts: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(the ``kernels`` launched from inside one of the host ranges ``hosts``, the innermost
    such range of each), joined on the correlation id."""
    ev = trace.events
    if not len(kernels) or not len(hosts):
        return kernels[:0], hosts[:0]
    device, launch = launch_links(trace)
    at = np.searchsorted(device, kernels)
    linked = (at < len(device)) & (device[np.minimum(at, len(device) - 1)] == kernels)
    kernels, launches = kernels[linked], launch[at[linked]]
    ranges = HostRanges.of(ev.ts[hosts], event_ends(ev)[hosts], ev.tid[hosts], hosts)
    pos = ranges.innermost(ev.ts[launches], ev.tid[launches])
    inside = pos >= 0
    return kernels[inside], ranges.index[pos[inside]]
