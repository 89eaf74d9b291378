"""FSDP per layer: the communication a rank waits for while each unit's hooks run.

FSDP2 brackets its work for a module with ranges named after it: ``FSDP::pre_forward (L)``
(unshard: issue and wait for L's all-gather unless it was prefetched), ``FSDP::pre_backward
(L)`` (the same before L's backward) and ``FSDP::post_backward_* (L)`` (reduce-scatter of L's
gradients). Communication running with no compute inside those ranges is what the layer's
collectives cost the step; the time the root's ``root_post_backward_callback`` waits (for the
last reduce-scatters) is charged to the root.
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.parallelism import activity
from trainprof.analysis.parallelism.result import LayerComm
from trainprof.analysis.parallelism.signals import FSDP_HOOK
from trainprof.analysis.streaming.parts import Part
from trainprof.trace.model import Trace

#: Which figure each hook's waiting goes to.
_FIGURE = {"pre_forward": "forward_gather_us", "pre_backward": "backward_gather_us",
           "root_post_backward_callback": "reduce_scatter_us"}
_REDUCE_PREFIX = "post_backward"
_ROOT_WAIT = "root_post_backward_callback"


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
