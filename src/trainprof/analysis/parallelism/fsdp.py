"""FSDP per layer: the communication a rank waits for while each unit's hooks run.

FSDP2 brackets its work for a module with ranges named after it: ``FSDP::pre_forward (L)``
(unshard: issue and wait for L's all-gather unless it was prefetched), ``FSDP::pre_backward
(L)`` (the same before L's backward) and ``FSDP::post_backward_* (L)`` (reduce-scatter of L's
gradients). Communication running with no compute inside those ranges is what the layer's
collectives cost the step; the time the root's ``root_post_backward_callback`` waits (for the
last reduce-scatters) is charged to the root.

On a GPU rank the host runs ahead of the device, so the hooks' host time says little about when
the device waits: there each communication kernel goes to the layer whose ``FSDP::all_gather
(L)`` or ``FSDP::post_backward_reduce (L)`` range launched it (an all-gather launched inside a
``FSDP::pre_backward`` range, including a prefetch, is a backward one), and counts the part of
it no compute kernel runs beside.
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.nesting import HostRanges
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import launch_links
from trainprof.analysis.parallelism import activity
from trainprof.analysis.parallelism.result import LayerComm
from trainprof.analysis.parallelism.signals import FSDP_HOOK
from trainprof.analysis.streaming.parts import Part
from trainprof.trace.model import Kind, Trace

#: Which figure each hook's waiting goes to.
_FIGURE = {"pre_forward": "forward_gather_us", "pre_backward": "backward_gather_us",
           "root_post_backward_callback": "reduce_scatter_us"}
_REDUCE_PREFIX = "post_backward"
_ROOT_WAIT = "root_post_backward_callback"
#: The FSDP2 range that issues a layer's reduce-scatter.
_REDUCE = "post_backward_reduce"


def layer_comm(trace: Trace, part: Part, ranges: np.ndarray, comm: np.ndarray
               ) -> dict[str, LayerComm]:
    """Per FSDP unit, its exposed communication over the part (``ranges``: the FSDP ranges the
    part owns; ``comm``: the rank's communication events)."""
    ev = trace.events
    start, end = part.start, part.end
    waiting = iv.subtract(activity.busy(trace, comm, start, end),
                          activity.compute(trace, start, end))
    hooks = [(int(i), h) for i in ranges.tolist() if (h := _hook(ev.names[ev.name[i]]))]
    if not hooks:
        return {}
    if len(comm) and (ev.kind[comm] == Kind.KERNEL).all():
        return _by_launch(trace, part, hooks, comm, waiting)
    idx = np.array([i for i, _ in hooks])
    lo, hi = np.maximum(ev.ts[idx], start), np.minimum(event_ends(ev)[idx], end)
    hi = np.maximum(hi, lo)
    root = np.array([h == _ROOT_WAIT for h, _ in (x for _, x in hooks)])
    exposed = iv.covered_in_windows(waiting, lo, hi)
    # The root's callback runs the first layers' post-backward hooks inside it: it keeps
    # only the waiting outside them.
    outside = iv.subtract(waiting, iv.union(lo[~root], hi[~root]))
    exposed[root] = iv.covered_in_windows(outside, lo[root], hi[root])
    out: dict[str, LayerComm] = {}
    for (_, (hook, layer)), x in zip(hooks, exposed.tolist(), strict=True):
        row = out.setdefault(layer, LayerComm(layer))
        if hook == "all_gather":
            row.gathers += 1
        figure = _FIGURE.get(hook) or ("reduce_scatter_us" if hook.startswith(_REDUCE_PREFIX)
                                        else None)
        if figure is not None:
            setattr(row, figure, getattr(row, figure) + x)
    return out


def _hook(name: str) -> tuple[str, str] | None:
    """(hook, module) of an FSDP2 range; the root module's ranges name no module."""
    m = FSDP_HOOK.match(name)
    if m:
        return m.group(1), m.group(2)
    if name.startswith("FSDP::") and " " not in name:
        return name.removeprefix("FSDP::"), ""
    return None


def _by_launch(trace: Trace, part: Part, hooks: list[tuple[int, tuple[str, str]]],
               kernels: np.ndarray, waiting: iv.Intervals) -> dict[str, LayerComm]:
    """Per layer, the exposed time of the communication kernels its ranges launched."""
    ev = trace.events
    ends = event_ends(ev)
    out: dict[str, LayerComm] = {}
    for _, (hook, layer) in hooks:
        if hook == "all_gather":
            out.setdefault(layer, LayerComm(layer)).gathers += 1
    kernels = kernels[part.owns(ev.ts[kernels], ends[kernels])]
    device, launch = launch_links(trace)
    at = np.searchsorted(device, kernels)
    linked = (at < len(device)) & (device[np.minimum(at, len(device) - 1)] == kernels)
    kernels, calls = kernels[linked], launch[at[linked]]
    if not len(kernels):
        return out
    issued = _ranges(trace, [i for i, (h, _) in hooks if h in ("all_gather", _REDUCE)])
    backward = _ranges(trace, [i for i, (h, _) in hooks if h == "pre_backward"])
    by_index = {i: h for i, h in hooks}
    pos = issued.innermost(ev.ts[calls], ev.tid[calls])
    in_backward = backward.innermost(ev.ts[calls], ev.tid[calls]) >= 0
    lo, hi = np.maximum(ev.ts[kernels], part.start), np.minimum(ends[kernels], part.end)
    exposed = iv.covered_in_windows(waiting, lo, np.maximum(hi, lo))
    for p, back, x in zip(pos.tolist(), in_backward.tolist(), exposed.tolist(), strict=True):
        if p < 0:
            continue
        hook, layer = by_index[int(issued.index[p])]
        figure = "reduce_scatter_us" if hook == _REDUCE else \
            "backward_gather_us" if back else "forward_gather_us"
        row = out.setdefault(layer, LayerComm(layer))
        setattr(row, figure, getattr(row, figure) + x)
    return out


def _ranges(trace: Trace, idx: list[int]) -> HostRanges:
    ev = trace.events
    at = np.array(idx, dtype=np.int64)
    return HostRanges.of(ev.ts[at], event_ends(ev)[at], ev.tid[at], at)

