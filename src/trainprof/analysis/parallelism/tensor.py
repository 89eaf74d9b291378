"""Tensor parallelism per layer: the collectives DTensor issues inside each layer (its
functional collectives, ``_c10d_functional::all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``), their time, the part no compute runs beside, and the part on the
step's critical path (docs/parallelism.md).

On a CPU rank (gloo) a collective is its functional op on the calling thread, the issue and
the ``wait_tensor`` where the thread waits. On a GPU rank it is each communication kernel
launched from inside a functional op (joined on the correlation id). A collective's layer is
the innermost module range (``nn.Module: ...``) or user annotation (``record_function``)
around its host op, else ``(backward)`` inside a backward op, else ``(outside layers)``.

The critical path is the ``critical_path`` section's, not drawn again: ``on_path`` meets the
collectives' spans with each step's path pieces on the same lane once both sections are
done (analysis/sections/registry.py ``link_sections``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.nesting import HostRanges
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.parallelism import activity
from trainprof.analysis.parallelism.result import TensorParallel, TensorSpans
from trainprof.analysis.parallelism.signals import TYPE_NAMES, type_code
from trainprof.analysis.parallelism.sums import TensorLayerSums
from trainprof.analysis.streaming.parts import Part
from trainprof.trace.model import FLAG_BACKWARD, FLAG_COMM, Kind, Trace

if TYPE_CHECKING:
    from trainprof.analysis.critical_path.result import CriticalPath

_OTHER = TYPE_NAMES.index("other")  # waits and wrappers: not a collective of their own
BACKWARD, OUTSIDE = "(backward)", "(outside layers)"
_MODULE_PREFIX = "nn.Module: "
_LAYER_KINDS = (Kind.USER_ANNOTATION, Kind.PYTHON)
#: Host ranges that are never a layer: steps and the profiler's own.
_NOT_LAYERS = ("ProfilerStep#", "PyTorch Profiler", "Optimizer.")


def tensor_part(trace: Trace, part: Part, functional: np.ndarray
                ) -> tuple[dict[str, TensorLayerSums], TensorSpans]:
    """Per layer, the tensor-parallel collectives the part owns (``functional``: the
    rank's functional collective host ops), and their spans for the critical path."""
    ev = trace.events
    ends = event_ends(ev)
    events, calls = _collectives(trace, functional)
    own = part.owns(ev.ts[events], ends[events])
    events, calls = events[own], calls[own]
    spans = TensorSpans()
    if not len(events):
        return {}, spans
    names = _layer_names(trace, calls)
    start, end = part.start, part.end
    compute = activity.compute(trace, start, end)
    out: dict[str, TensorLayerSums] = {}
    lanes = _lanes(trace, events)
    for name in dict.fromkeys(names):
        mine = events[np.array([n == name for n in names])]
        busy = activity.busy(trace, mine, start, end)
        calls_of = sum(type_code(ev.names[ev.name[i]]) != _OTHER for i in mine.tolist())
        out[name] = TensorLayerSums(name, calls=calls_of, comm_us=busy.total(),
                                    exposed_us=iv.subtract(busy, compute).total())
    spans.lane, spans.layer = lanes, names
    spans.start_us, spans.end_us = ev.ts[events].tolist(), ends[events].tolist()
    return out, spans


def _collectives(trace: Trace, functional: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the collectives' events, the host op each was issued from): the communication kernels
    launched inside a functional op where the rank has kernels, else the functional ops."""
    ev = trace.events
    if not activity.on_device(trace) or not len(functional):
        return functional, functional
    kernels = np.flatnonzero((ev.kind == Kind.KERNEL) & ev.flagged(FLAG_COMM))
    return activity.launched_in(trace, kernels, functional)


def _layer_names(trace: Trace, calls: np.ndarray) -> list[str]:
    """The layer of each host op ``calls``: the innermost layer range around it."""
    ev = trace.events
    ends = event_ends(ev)
    candidates = np.flatnonzero(np.isin(ev.kind, _LAYER_KINDS) & ~ev.flagged(FLAG_COMM))
    # Judged once per (kind, name), not per event.
    pairs, inverse = np.unique(np.stack([ev.kind[candidates].astype(np.int64),
                                         ev.name[candidates].astype(np.int64)]),
                               axis=1, return_inverse=True)
    ok = np.array([_is_layer(int(k), ev.names[int(n)]) for k, n in pairs.T.tolist()],
                  dtype=bool)
    layers = candidates[ok[inverse.reshape(-1)]] if len(candidates) else candidates
    pos = HostRanges.of(ev.ts[layers], ends[layers], ev.tid[layers], layers).innermost(
        ev.ts[calls], ev.tid[calls]) if len(layers) else np.full(len(calls), -1)
    back = np.flatnonzero(ev.flagged(FLAG_BACKWARD) & (ev.kind == Kind.CPU_OP))
    in_back = iv.covered_in_windows(iv.union(ev.ts[back], ends[back]), ev.ts[calls],
                                    ev.ts[calls] + 1e-3) > 0
    out = []
    for p, b in zip(pos.tolist(), in_back.tolist(), strict=True):
        if p >= 0:
            out.append(ev.names[ev.name[layers[p]]].removeprefix(_MODULE_PREFIX))
        else:
            out.append(BACKWARD if b else OUTSIDE)
    return out


def _is_layer(kind: int, name: str) -> bool:
    if kind == Kind.PYTHON:
        return name.startswith(_MODULE_PREFIX)
    return not name.startswith(_NOT_LAYERS)


def _lanes(trace: Trace, events: np.ndarray) -> list[str]:
    """Each event's lane as the critical path names it."""
    ev = trace.events
    out = []
    for i in events.tolist():
        if ev.kind[i] == Kind.KERNEL:
            out.append(f"GPU {int(ev.device[i])} stream {int(ev.stream[i])}")
        else:
            out.append(f"host thread {trace.threads[int(ev.tid[i])][1]}")
    return out


def on_path(tensor: TensorParallel, path: CriticalPath | None) -> None:
    """Fill ``tensor``'s time on the critical path: per layer, its collectives' spans met with
    the path's pieces on the same lane, over the steps the path was drawn for."""
    if path is None or not path.steps:
        return
    spans = tensor.spans
    tensor.path_steps = len(path.steps)
    n = tensor.path_steps * 1000.0
    tensor.path_ms = sum(s.step_us for s in path.steps) / n
    lanes, layers = np.array(spans.lane), np.array(spans.layer)
    starts, ends = np.array(spans.start_us), np.array(spans.end_us)
    by_layer = {x.layer: 0.0 for x in tensor.layers}  # µs on the path
    for step in path.steps:
        pieces = step.pieces
        piece_lane = np.array(pieces.lanes, dtype=object)[pieces.lane] if len(pieces) else \
            np.array([], dtype=object)
        for lane in np.unique(lanes).tolist():
            on = piece_lane == lane
            if not on.any():
                continue
            walked = iv.union(pieces.start_us[on], pieces.end_us[on])
            for name in np.unique(layers[lanes == lane]).tolist():
                mine = (lanes == lane) & (layers == name)
                met = iv.intersect(iv.union(starts[mine], ends[mine]), walked).total()
                by_layer[name] += met
    for x in tensor.layers:
        x.on_path_ms = by_layer[x.layer] / n
    tensor.on_path_ms = sum(by_layer.values()) / n
