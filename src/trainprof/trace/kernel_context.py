"""Kernel classes of one trace: the name's class, and for unknown names the launch context.

``apply_launch_context`` runs once as a trace loads: a kernel whose name is of no known family,
launched (same correlation id) while its host thread was inside a communication op
(``nccl:*``, ``c10d::*``, ``record_param_comms``) or a ``dispatch``/``combine`` Python
function, gets the communication flag, so every analysis that asks ``FLAG_COMM`` agrees.
"""

from __future__ import annotations

import numpy as np

from trainprof.trace.kernel_class import (
    KernelClass,
    KernelClasses,
    classes_of_names,
    is_communication_frame,
)
from trainprof.trace.model import FLAG_COMM, LAUNCH_KINDS, Kind, Trace

_CACHE = "_trainprof_kernel_classes"
#: Where ``apply_launch_context`` keeps the indices of the kernels it flagged.
LAUNCH_CONTEXT_KEY = _CACHE + "_launch"
_CONTEXT_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)


def apply_launch_context(trace: Trace) -> None:
    """Flag as communication the unknown kernels launched inside a communication context."""
    ev = trace.events
    kernels = np.flatnonzero(ev.kind == Kind.KERNEL)
    if not len(kernels):
        return
    _, known = classes_of_names(ev.names, np.unique(ev.name[kernels]))
    candidates = kernels[~known[ev.name[kernels]] & ~ev.flagged(FLAG_COMM)[kernels]]
    by_launch = candidates[_launched_in_context(trace, candidates)]
    ev.flags[by_launch] |= FLAG_COMM
    trace.__dict__[LAUNCH_CONTEXT_KEY] = by_launch


def kernel_classes(trace: Trace) -> KernelClasses:
    """Class of every kernel of the trace (cached on the trace)."""
    cached = trace.__dict__.get(_CACHE)
    if cached is not None:
        return cached
    ev = trace.events
    kernel = ev.kind == Kind.KERNEL
    cls_of_name, known = classes_of_names(ev.names, np.unique(ev.name[kernel]))
    cls = cls_of_name[ev.name]
    by_name = known[ev.name] & kernel
    by_launch = np.zeros(len(ev), dtype=bool)
    by_launch[trace.__dict__.get(LAUNCH_CONTEXT_KEY, np.empty(0, dtype=np.int64))] = True
    cls[kernel & ev.flagged(FLAG_COMM)] = KernelClass.COMMUNICATION
    cls[~kernel] = KernelClass.COMPUTE
    result = KernelClasses(cls=cls, by_name=by_name, by_launch=by_launch & kernel)
    trace.__dict__[_CACHE] = result
    return result


def _launched_in_context(trace: Trace, kernels: np.ndarray) -> np.ndarray:
    """Per kernel, whether its launch call lies inside a communication op or frame."""
    ev = trace.events
    out = np.zeros(len(kernels), dtype=bool)
    launch = _launch_calls(trace, kernels)
    host = ev.of_kind(*_CONTEXT_KINDS) & ev.flagged(FLAG_COMM)
    python = np.flatnonzero(ev.kind == Kind.PYTHON)
    if len(python):
        names = np.unique(ev.name[python])
        frame = np.zeros(len(ev.names), dtype=bool)
        frame[names] = [is_communication_frame(ev.names[n]) for n in names.tolist()]
        host[python[frame[ev.name[python]]]] = True
    context = np.flatnonzero(host)
    if not len(context) or not (launch >= 0).any():
        return out
    has = launch >= 0
    l_tid, l_ts = ev.tid[launch[has]], ev.ts[launch[has]]
    inside = np.zeros(len(l_ts), dtype=bool)
    for tid in np.unique(ev.tid[context]).tolist():  # one pass per thread with a context
        mine = context[ev.tid[context] == tid]
        starts, ends = _union(ev.ts[mine], ev.end[mine])
        on = l_tid == tid
        pos = np.searchsorted(starts, l_ts[on], side="right") - 1
        inside[on] = (pos >= 0) & (l_ts[on] < ends[np.maximum(pos, 0)])
    out[has] = inside
    return out


def _launch_calls(trace: Trace, kernels: np.ndarray) -> np.ndarray:
    """Per kernel, the index of the runtime/driver call with its correlation id, or -1."""
    ev = trace.events
    launches = np.flatnonzero(ev.of_kind(*LAUNCH_KINDS) & (ev.correlation >= 0))
    out = np.full(len(kernels), -1, dtype=np.int64)
    if not len(launches):
        return out
    corr = ev.correlation[launches]
    order = np.argsort(corr, kind="stable")
    sorted_corr = corr[order]
    wanted = ev.correlation[kernels]
    pos = np.minimum(np.searchsorted(sorted_corr, wanted), len(sorted_corr) - 1)
    hit = (sorted_corr[pos] == wanted) & (wanted >= 0)
    out[hit] = launches[order[pos[hit]]]
    return out


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering [starts, ends)."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])
