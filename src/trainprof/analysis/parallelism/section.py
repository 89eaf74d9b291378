"""The ``parallelism`` section of a rank: which parallelism its trace shows, its pipeline
figures per step and its FSDP figures per layer, computed window by window
(analysis/streaming/windows.py). See docs/parallelism.md."""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.parallelism import activity
from trainprof.analysis.parallelism.expert import expert_part
from trainprof.analysis.parallelism.fsdp import layer_comm, prefetch_distances, queues
from trainprof.analysis.parallelism.kinds import detect, process_groups
from trainprof.analysis.parallelism.result import (
    Parallelism,
    ProcessGroup,
    RankPipeline,
    StageStep,
    TensorParallel,
    TensorSpans,
)
from trainprof.analysis.parallelism.signals import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    P2P_CODES,
    REDUCTIONS,
    TYPE_NAMES,
    Signal,
    is_c10d_call,
    is_functional,
    name_signal,
    pipeline_stage,
    type_code,
)
from trainprof.analysis.parallelism.sums import ExpertSums, LayerSums, QueueSums, TensorLayerSums
from trainprof.analysis.parallelism.tensor import tensor_part
from trainprof.analysis.streaming.parts import Part, part_of
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.trace.model import FLAG_BACKWARD, Kind, Trace

_HOST = (Kind.CPU_OP, Kind.USER_ANNOTATION)
#: Where a collective call is counted from, as codes.
_SOURCES = ("call", "backend", "kernel")
# Kept on the trace object: the signal of each name id of the trace.
_ATTRIBUTE = "_trainprof_parallelism_signals"
_COMM_ATTRIBUTE = "_trainprof_parallelism_comm_names"
_FSDP_ATTRIBUTE = "_trainprof_parallelism_fsdp_ranges"
_FUNCTIONAL_ATTRIBUTE = "_trainprof_parallelism_functional"
#: Bits of ``_comm_names`` above the type code (which stays under 16).
_CALL, _FUNCTIONAL = 16, 32


class _Part(msgspec.Struct):
    """What one window knows: counts over its part of the span, its own steps' figures."""

    signals: Counter[str] = field(default_factory=Counter)
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)  # (source, type)
    stages: set[int] = field(default_factory=set)
    stage_steps: list[StageStep] = field(default_factory=list)
    forwards_first: bool = True  # in each step, every forward micro-batch before the backward
    layers: dict[str, LayerSums] = field(default_factory=dict)
    groups: list[ProcessGroup] = field(default_factory=list)
    queues: QueueSums | None = None
    tensor: dict[str, TensorLayerSums] = field(default_factory=dict)
    tensor_spans: TensorSpans = field(default_factory=TensorSpans)
    expert: ExpertSums | None = None


def _name_signals(trace: Trace) -> np.ndarray:
    """The Signal of each name of the trace (worked out once per trace)."""
    store = trace.__dict__
    if _ATTRIBUTE not in store:
        store[_ATTRIBUTE] = np.array([name_signal(n) for n in trace.events.names],
                                     dtype=np.int8)
    signals: np.ndarray = store[_ATTRIBUTE]
    return signals


def _partial(window: Window) -> _Part:
    trace, part = window.trace, part_of(window)
    ev = trace.events
    out = _Part(groups=process_groups(trace.metadata))
    if part.end <= part.start:
        return out
    ends = event_ends(ev)
    host = np.flatnonzero(_name_signals(trace)[ev.name] != 0)
    host = host[np.isin(ev.kind[host], _HOST)]
    host = host[part.owns(ev.ts[host], ends[host])]
    signal = _name_signals(trace)[ev.name[host]]
    for s in Signal:
        if s != Signal.NONE and (n := int((signal == s).sum())):
            out.signals[s.name.lower()] = n
    out.stages = {stage for i in host.tolist()
                  if (stage := pipeline_stage(ev.names[ev.name[i]])) is not None}
    every = activity.all_comm_events(trace)
    mine = part.owns(ev.ts[every], ends[every])
    every, every_types = every[mine], _types(trace, every[mine])
    _count_calls(trace, every, every_types, out)
    comm = activity.comm_events(trace)
    types = _types(trace, comm)
    micro = host[(signal == Signal.FORWARD_MICRO_BATCH) | (signal == Signal.BACKWARD_MICRO_BATCH)]
    p2p = comm[np.isin(types, P2P_CODES)]
    if len(p2p) or len(micro):
        out.stage_steps, out.forwards_first = _stage_steps(window, p2p, micro)
        calls = np.isin(every_types, P2P_CODES) & (ev.kind[every] != Kind.KERNEL)
        _count_roles(trace, every[calls], micro, out)
    if out.signals.get("fsdp_range"):
        _fsdp_part(trace, part, host[signal == Signal.FSDP_RANGE], comm, types, out)
    _model_parallel(trace, part, comm, types, out)
    return out


def _fsdp_part(trace: Trace, part: Part, ranges: np.ndarray, comm: np.ndarray,
               types: np.ndarray, out: _Part) -> None:
    """The FSDP figures of the part: per layer its exposed communication and prefetch
    distances, and where its all-gathers and reductions ran."""
    out.layers = layer_comm(trace, part, ranges, comm)
    for layer, (forward, backward) in prefetch_distances(trace, part, _fsdp_ranges(trace)).items():
        row = out.layers.setdefault(layer, LayerSums(layer))
        row.forward_distances += forward
        row.backward_distances += backward
    backend = (_comm_names(trace)[trace.events.name[comm]] & _CALL) == 0
    out.queues = queues(trace, part, comm, backend & (types == ALL_GATHER),
                        backend & np.isin(types, REDUCTIONS))
    out.queues.process_groups = len(out.groups)


def _fsdp_ranges(trace: Trace) -> np.ndarray:
    """Every FSDP range of the trace on the host (worked out once per trace)."""
    store = trace.__dict__
    if _FSDP_ATTRIBUTE not in store:
        ev = trace.events
        idx = np.flatnonzero(_name_signals(trace)[ev.name] == Signal.FSDP_RANGE)
        store[_FSDP_ATTRIBUTE] = idx[np.isin(ev.kind[idx], _HOST)]
    ranges: np.ndarray = store[_FSDP_ATTRIBUTE]
    return ranges


def _model_parallel(trace: Trace, part: Part, comm: np.ndarray, types: np.ndarray,
                    out: _Part) -> None:
    """The tensor-parallel collectives per layer and the all-to-all, where the trace has
    them (analysis/parallelism/tensor.py, expert.py)."""
    functional = _functional_ops(trace)
    if len(functional) and not out.signals.get("fsdp_range"):
        out.tensor, out.tensor_spans = tensor_part(trace, part, functional)
    a2a = comm[types == ALL_TO_ALL]
    if out.calls.get(("call", "all_to_all")) or out.calls.get(("backend", "all_to_all")):
        a2a = np.union1d(a2a, _send_recv_all_to_all(trace, comm, types))
    if len(a2a):
        out.expert = expert_part(trace, part, a2a)


def _send_recv_all_to_all(trace: Trace, comm: np.ndarray, types: np.ndarray) -> np.ndarray:
    """NCCL runs an all-to-all as grouped sends and receives: the SendRecv kernels launched
    inside an all-to-all's host op (``c10d::alltoall_base_``, ``nccl:all_to_all``)."""
    ev = trace.events
    if not len(comm) or ev.kind[comm[0]] != Kind.KERNEL:
        return comm[:0]
    every = activity.all_comm_events(trace)
    host = every[ev.kind[every] != Kind.KERNEL]
    calls = host[_types(trace, host) == ALL_TO_ALL]
    inside, _ = activity.launched_in(trace, comm[np.isin(types, P2P_CODES)], calls)
    return inside


def _functional_ops(trace: Trace) -> np.ndarray:
    """The rank's functional collective host ops (DTensor's), all of them (worked out once per
    trace)."""
    store = trace.__dict__
    if _FUNCTIONAL_ATTRIBUTE not in store:
        ev = trace.events
        every = activity.all_comm_events(trace)
        host = every[ev.kind[every] != Kind.KERNEL]
        store[_FUNCTIONAL_ATTRIBUTE] = host[(_comm_names(trace)[ev.name[host]] & _FUNCTIONAL)
                                            != 0]
    ops: np.ndarray = store[_FUNCTIONAL_ATTRIBUTE]
    return ops


def _comm_names(trace: Trace) -> np.ndarray:
    """Per name of the trace, 16 x (is a c10d call) + 32 x (is a functional collective) + its
    type code (signals.TYPE_NAMES), filled for the names of communication events (worked out
    once per trace)."""
    store = trace.__dict__
    if _COMM_ATTRIBUTE not in store:
        ev = trace.events
        codes = np.zeros(len(ev.names), dtype=np.int64)
        for n in np.unique(ev.name[activity.all_comm_events(trace)]).tolist():
            name = ev.names[n]
            codes[n] = type_code(name) + _CALL * is_c10d_call(name) \
                + _FUNCTIONAL * is_functional(name)
        store[_COMM_ATTRIBUTE] = codes
    table: np.ndarray = store[_COMM_ATTRIBUTE]
    return table


def _types(trace: Trace, idx: np.ndarray) -> np.ndarray:
    """The type code (signals.TYPE_NAMES) of each communication event ``idx``."""
    return _comm_names(trace)[trace.events.name[idx]] % _CALL


def _count_calls(trace: Trace, idx: np.ndarray, types: np.ndarray, out: _Part) -> None:
    """Collective calls by (source, type); all-reduces issued in backward and functional
    (DTensor) collectives as signals of their own."""
    ev = trace.events
    flags = _comm_names(trace)[ev.name[idx]]
    source = np.where(ev.kind[idx] == Kind.KERNEL, 2, np.where(flags & _CALL, 0, 1))
    n_types = len(TYPE_NAMES)
    counts = np.bincount(source * n_types + types, minlength=len(_SOURCES) * n_types)
    for key in np.flatnonzero(counts).tolist():
        out.calls[(_SOURCES[key // n_types], TYPE_NAMES[key % n_types])] += int(counts[key])
    if n := int(np.count_nonzero(flags & _FUNCTIONAL)):
        out.signals["functional_collective"] += n
    # Each all-reduce once: its c10d call, else its backend range.
    reduces = idx[(types == ALL_REDUCE) & (source == 0)]
    if not len(reduces):
        reduces = idx[(types == ALL_REDUCE) & (source == 1)]
    reduces = _not_functional(trace, reduces)
    if len(reduces):
        back = np.flatnonzero(ev.flagged(FLAG_BACKWARD) & (ev.kind == Kind.CPU_OP))
        inside = iv.covered_in_windows(iv.union(ev.ts[back], event_ends(ev)[back]),
                                       ev.ts[reduces], ev.ts[reduces] + 1e-3) > 0
        if n := int(inside.sum()):
            out.signals["all_reduce_in_backward"] += n


def _not_functional(trace: Trace, reduces: np.ndarray) -> np.ndarray:
    """The all-reduces not issued by a functional (DTensor) collective: tensor parallelism's
    all-reduces in backward are not DDP's."""
    functional = _functional_ops(trace)
    if not len(reduces) or not len(functional):
        return reduces
    ev = trace.events
    spans = iv.union(ev.ts[functional], event_ends(ev)[functional])
    inside = iv.covered_in_windows(spans, ev.ts[reduces], ev.ts[reduces] + 1e-3) > 0
    return reduces[~inside]


def _stage_steps(window: Window, p2p: np.ndarray, micro: np.ndarray
                 ) -> tuple[list[StageStep], bool]:
    """The pipeline figures of the window's own steps, and whether every forward micro-batch
    of each step started before its first backward one."""
    trace, steps = window.trace, window.steps
    if not len(steps):
        return [], True
    ev = trace.events
    start, end = float(steps.starts[0]), float(steps.ends[-1])
    compute = activity.compute(trace, start, end)
    sends = activity.busy(trace, p2p, start, end)
    waiting = iv.subtract(sends, compute)
    cover = [iv.covered_in_windows(s, steps.starts, steps.ends)
             for s in (compute, sends, waiting)]
    fwd = micro[_name_signals(trace)[ev.name[micro]] == Signal.FORWARD_MICRO_BATCH]
    bwd = micro[_name_signals(trace)[ev.name[micro]] == Signal.BACKWARD_MICRO_BATCH]
    out, forwards_first = [], True
    for k in range(len(steps)):
        lo, hi = float(steps.starts[k]), float(steps.ends[k])
        f = fwd[(ev.ts[fwd] >= lo) & (ev.ts[fwd] < hi)]
        b = bwd[(ev.ts[bwd] >= lo) & (ev.ts[bwd] < hi)]
        # Warm-up: until the first forward micro-batch ends; cool-down: from the start of the
        # last backward micro-batch.
        warm = min(float(event_ends(ev)[f[0]]), hi) if len(f) else lo
        cool = max(float(ev.ts[b[-1]]), warm) if len(b) else hi
        phases = iv.covered_in_windows(waiting, np.array([lo, warm, cool]),
                                       np.array([warm, cool, hi]))
        forwards_first &= bool(not len(b) or not len(f) or ev.ts[f].max() < ev.ts[b].min())
        out.append(StageStep(
            step_ms=(hi - lo) / 1000.0, compute_ms=float(cover[0][k]) / 1000.0,
            p2p_ms=float(cover[1][k]) / 1000.0, p2p_exposed_ms=float(cover[2][k]) / 1000.0,
            forward_micro_batches=len(f), warmup_wait_ms=float(phases[0]) / 1000.0,
            steady_wait_ms=float(phases[1]) / 1000.0, cooldown_wait_ms=float(phases[2]) / 1000.0))
    return out, forwards_first


def _count_roles(trace: Trace, p2p: np.ndarray, micro: np.ndarray, out: _Part) -> None:
    """Send and recv calls (host) inside forward micro-batches: a first stage receives none, a
    last stage sends none."""
    ev = trace.events
    fwd = micro[_name_signals(trace)[ev.name[micro]] == Signal.FORWARD_MICRO_BATCH]
    if not len(fwd) or not len(p2p):
        return
    ranges = iv.union(ev.ts[fwd], event_ends(ev)[fwd])
    inside = iv.covered_in_windows(ranges, ev.ts[p2p], ev.ts[p2p] + 1e-3) > 0
    kinds = _types(trace, p2p[inside])
    send, recv, both = P2P_CODES
    out.signals["forward_sends"] += int(np.isin(kinds, (send, both)).sum())
    out.signals["forward_recvs"] += int(np.isin(kinds, (recv, both)).sum())


def _combine(parts: list[_Part], steps: StepWindows) -> Parallelism:
    signals: Counter[str] = Counter()
    calls: Counter[tuple[str, str]] = Counter()
    layers: dict[str, LayerSums] = {}
    fsdp_queues: QueueSums | None = None
    for p in parts:
        signals.update(p.signals)
        calls.update(p.calls)
        for name, layer in p.layers.items():
            layers.setdefault(name, LayerSums(name)).add(layer)
        if p.queues is not None:
            fsdp_queues = fsdp_queues or QueueSums()
            fsdp_queues.add(p.queues)
    by_type = _calls_by_type(calls)
    kinds, evidence = detect(signals, by_type)
    n = len(steps)
    tensor = _tensor_of(parts, n) if "tensor" in kinds else None
    expert = None
    if "expert" in kinds:
        sums = ExpertSums()
        for p in parts:
            if p.expert is not None:
                sums.add(p.expert)
        expert = sums.figures(n)
    fsdp = "fsdp" in kinds
    return Parallelism(kinds=kinds, evidence=evidence, calls=by_type,
                       process_groups=parts[0].groups if parts else [], steps=n,
                       pipeline=_pipeline(parts, signals) if "pipeline" in kinds else None,
                       layers=[x.figures(n) for x in layers.values() if x.gathers or x.exposed_us]
                       if fsdp else [],
                       fsdp_queues=fsdp_queues.figures(n) if fsdp and fsdp_queues else None,
                       tensor=tensor, expert=expert)


def _pipeline(parts: list[_Part], signals: Counter[str]) -> RankPipeline | None:
    """The windows' pipeline steps, the schedule and the stage they show (None: no step)."""
    stage_steps = [s for p in parts for s in p.stage_steps]
    if not stage_steps:
        return None
    stages = set().union(*(p.stages for p in parts))
    counts = [s.forward_micro_batches for s in stage_steps if s.forward_micro_batches]
    local = max(len(stages), 1)
    first = all(p.forwards_first for p in parts)
    return RankPipeline(
        per_step=stage_steps, micro_batches=int(np.median(counts)) // local if counts else None,
        schedule=("GPipe" if first else "1F1B") if counts else None,
        stage=min(stages) if stages else None, role=_role(signals))


def _tensor_of(parts: list[_Part], steps: int) -> TensorParallel:
    """The windows' tensor-parallel layers added up, their spans joined."""
    layers: dict[str, TensorLayerSums] = {}
    spans = TensorSpans()
    for p in parts:
        for name, layer in p.tensor.items():
            layers.setdefault(name, TensorLayerSums(name)).add(layer)
        spans.extend(p.tensor_spans)
    return TensorParallel(layers=[x.figures(steps) for x in layers.values()], spans=spans)


def _calls_by_type(calls: Counter[tuple[str, str]]) -> dict[str, int]:
    """Collective calls by type, from the c10d calls when the trace has them (each call once),
    else the backend's ranges, else the kernels."""
    for source in ("call", "backend", "kernel"):
        mine = {t: n for (s, t), n in calls.items() if s == source}
        if mine:
            return {t: mine[t] for t in TYPE_NAMES if t in mine}
    return {}


def _role(signals: Counter[str]) -> str | None:
    recvs, sends = signals.get("forward_recvs", 0), signals.get("forward_sends", 0)
    if not recvs and not sends:
        return None
    return "first" if not recvs else "last" if not sends else "middle"


#: The parallelism a rank's trace shows, computed window by window: ``parallelism(trace,
#: steps)`` for a whole trace.
parallelism: WindowedSection[_Part, Parallelism] = WindowedSection(_partial, _combine)

