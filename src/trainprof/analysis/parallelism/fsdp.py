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

import bisect

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.nesting import HostRanges
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import launch_links
from trainprof.analysis.parallelism import activity
from trainprof.analysis.parallelism.signals import FSDP_HOOK
from trainprof.analysis.parallelism.sums import LayerSums, QueueSums
from trainprof.analysis.streaming.parts import Part
from trainprof.lazy import LazyPattern
from trainprof.trace.model import Kind, Trace

#: Which figure each hook's waiting goes to.
_FIGURE = {"pre_forward": "forward_gather_us", "pre_backward": "backward_gather_us",
           "forward_prefetch": "forward_gather_us", "backward_prefetch": "backward_gather_us",
           "root_post_backward_callback": "reduce_scatter_us"}
#: The ranges of a prefetch: ``FSDP::forward_prefetch for layers.3`` (the layer it gathers).
_PREFETCH = LazyPattern(r"^FSDP::(forward_prefetch|backward_prefetch) for (.*)$")
_REDUCE_PREFIX = "post_backward"
_ROOT_WAIT = "root_post_backward_callback"
#: The FSDP2 range that issues a layer's reduce-scatter.
_REDUCE = "post_backward_reduce"


def layer_comm(trace: Trace, part: Part, ranges: np.ndarray, comm: np.ndarray
               ) -> dict[str, LayerSums]:
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
    prefetch = np.array([h.endswith("_prefetch") for h, _ in (x for _, x in hooks)])
    exposed = iv.covered_in_windows(waiting, lo, hi)
    # A prefetch inside another layer's hook (FSDP2's default backward prefetch runs in the
    # pre_backward of the layer after) waits for the layer it gathers, not for that one.
    other = ~root & ~prefetch
    unprefetched = iv.subtract(waiting, iv.union(lo[prefetch], hi[prefetch]))
    exposed[other] = iv.covered_in_windows(unprefetched, lo[other], hi[other])
    # The root's callback runs the first layers' post-backward hooks inside it: it keeps
    # only the waiting outside them.
    outside = iv.subtract(waiting, iv.union(lo[~root], hi[~root]))
    exposed[root] = iv.covered_in_windows(outside, lo[root], hi[root])
    out: dict[str, LayerSums] = {}
    for (_, (hook, layer)), x in zip(hooks, exposed.tolist(), strict=True):
        row = out.setdefault(layer, LayerSums(layer))
        if hook == "all_gather":
            row.gathers += 1
        figure = _FIGURE.get(hook) or ("reduce_scatter_us" if hook.startswith(_REDUCE_PREFIX)
                                        else None)
        if figure is not None:
            setattr(row, figure, getattr(row, figure) + x)
    return out


def _hook(name: str) -> tuple[str, str] | None:
    """(hook, module) of an FSDP2 range; the root module's ranges name no module."""
    m = FSDP_HOOK.match(name) or _PREFETCH.match(name)
    if m:
        return m.group(1), m.group(2)
    if name.startswith("FSDP::") and " " not in name:
        return name.removeprefix("FSDP::"), ""
    return None


def _by_launch(trace: Trace, part: Part, hooks: list[tuple[int, tuple[str, str]]],
               kernels: np.ndarray, waiting: iv.Intervals) -> dict[str, LayerSums]:
    """Per layer, the exposed time of the communication kernels its ranges launched."""
    ev = trace.events
    ends = event_ends(ev)
    out: dict[str, LayerSums] = {}
    for _, (hook, layer) in hooks:
        if hook == "all_gather":
            out.setdefault(layer, LayerSums(layer)).gathers += 1
    kernels = kernels[part.owns(ev.ts[kernels], ends[kernels])]
    device, launch = launch_links(trace)
    at = np.searchsorted(device, kernels)
    linked = (at < len(device)) & (device[np.minimum(at, len(device) - 1)] == kernels)
    kernels, calls = kernels[linked], launch[at[linked]]
    if not len(kernels):
        return out
    issued = _ranges(trace, [i for i, (h, _) in hooks if h in ("all_gather", _REDUCE)])
    backward = _ranges(trace, [i for i, (h, _) in hooks
                               if h in ("pre_backward", "backward_prefetch")])
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
        row = out.setdefault(layer, LayerSums(layer))
        setattr(row, figure, getattr(row, figure) + x)
    return out


def _ranges(trace: Trace, idx: list[int]) -> HostRanges:
    ev = trace.events
    at = np.array(idx, dtype=np.int64)
    return HostRanges.of(ev.ts[at], event_ends(ev)[at], ev.tid[at], at)



def prefetch_distances(trace: Trace, part: Part, fsdp: np.ndarray
                       ) -> dict[str, tuple[list[int], list[int]]]:
    """Per layer, the prefetch distance of each of its all-gathers the part owns, in forward and
    in backward (``fsdp``: every FSDP range of the trace, on the host).

    An ``FSDP::all_gather (L)`` range is a backward one when the innermost FSDP range around it
    is a backward one (``FSDP::pre_backward (K)``, ``FSDP::backward_prefetch for L``). Its use
    is the end of the next ``FSDP::pre_forward (L)`` (``pre_backward``) range; its distance is
    the number of other layers whose compute ended between its issue and that use: the layers
    with an ``FSDP::post_forward`` (``post_backward_*``) range starting in between.
    """
    ev = trace.events
    ends = event_ends(ev)
    hooks = [_hook(ev.names[ev.name[i]]) for i in fsdp.tolist()]
    gathers = np.array([i for i, h in zip(fsdp.tolist(), hooks, strict=True)
                        if h is not None and h[0] == "all_gather"], dtype=np.int64)
    gathers = gathers[part.owns(ev.ts[gathers], ends[gathers])] if len(gathers) else gathers
    if not len(gathers):
        return {}
    context = np.array([i for i, h in zip(fsdp.tolist(), hooks, strict=True)
                        if h is None or not h[0].startswith("all_gather")], dtype=np.int64)
    outer_ranges = _ranges(trace, context.tolist())
    around = outer_ranges.innermost(ev.ts[gathers], ev.tid[gathers])
    uses, done = _uses_and_done(trace, fsdp, hooks)
    out: dict[str, tuple[list[int], list[int]]] = {}
    for g, p in zip(gathers.tolist(), around.tolist(), strict=True):
        _, layer = _hook(ev.names[ev.name[g]]) or ("", "")
        outer = ev.names[ev.name[outer_ranges.index[p]]] if p >= 0 else ""
        pass_ = "backward" if "backward" in outer else "forward"
        issued = float(ev.ts[g])
        at_use = uses.get((pass_, layer), [])
        k = bisect.bisect_left(at_use, issued)
        if k == len(at_use):
            continue
        times, finished = done[pass_]
        lo, hi = bisect.bisect_right(times, issued), bisect.bisect_right(times, at_use[k])
        between = set(finished[lo:hi]) - {layer, ""}
        out.setdefault(layer, ([], []))[pass_ == "backward"].append(len(between))
    return out


def _uses_and_done(trace: Trace, fsdp: np.ndarray, hooks: list[tuple[str, str] | None]
                   ) -> tuple[dict[tuple[str, str], list[float]],
                              dict[str, tuple[list[float], list[str]]]]:
    """When each layer gets its parameters in each pass (the ends of its ``pre_forward`` and
    ``pre_backward`` ranges, sorted), and when each layer's compute ends in each pass (the
    starts of ``post_forward`` and ``post_backward_*`` ranges, sorted, with their layers)."""
    ev = trace.events
    ends = event_ends(ev)
    uses: dict[tuple[str, str], list[float]] = {}
    finished: dict[str, list[tuple[float, str]]] = {"forward": [], "backward": []}
    for i, h in zip(fsdp.tolist(), hooks, strict=True):
        if h is None:
            continue
        hook, layer = h
        if hook in ("pre_forward", "pre_backward"):
            uses.setdefault((hook.removeprefix("pre_"), layer), []).append(float(ends[i]))
        elif hook == "post_forward" or hook.startswith(_REDUCE_PREFIX):
            finished["forward" if hook == "post_forward" else "backward"].append(
                (float(ev.ts[i]), layer))
    for times in uses.values():
        times.sort()
    done = {}
    for pass_, rows in finished.items():
        rows.sort()
        done[pass_] = ([t for t, _ in rows], [x for _, x in rows])
    return uses, done


def queues(trace: Trace, part: Part, comm: np.ndarray, gather: np.ndarray,
           reduce: np.ndarray) -> QueueSums:
    """Where the rank's all-gathers (``comm[gather]``) and gradient reductions
    (``comm[reduce]``) ran: kernels on their (device, stream), host ranges of the backend
    (``gloo:*``) on their (-1, thread); and how long both kinds ran at once inside the part."""
    ev = trace.events
    ends = event_ends(ev)
    out = QueueSums()
    mine = part.owns(ev.ts[comm], ends[comm])
    for mask, into in ((gather, out.gather_queues), (reduce, out.reduce_queues)):
        idx = comm[mask & mine]
        kernel = ev.kind[idx] == Kind.KERNEL
        into.update(zip(np.where(kernel, ev.device[idx], -1).tolist(),
                        np.where(kernel, ev.stream[idx], ev.tid[idx]).tolist(), strict=True))
    gathers = activity.busy(trace, comm[gather], part.start, part.end)
    reductions = activity.busy(trace, comm[reduce], part.start, part.end)
    out.gather_us, out.reduce_us = gathers.total(), reductions.total()
    out.overlap_us = iv.intersect(gathers, reductions).total()
    return out
