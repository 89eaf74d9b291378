"""The parallelism section's records: what one rank shows of the job's parallelism, its
pipeline figures per step and its FSDP figures per layer (docs/parallelism.md)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.dataframes import data_frame

#: The kinds of parallelism, in the order they are named.
KINDS = ("fsdp", "pipeline", "tensor", "expert", "ddp")
#: FSDP's all-gathers and reductions count as serialised (one communicator running one at a
#: time) while they run at once for at most this share of the shorter kind's time: gloo's two
#: worker threads of one process group overlapped them 0.1 ms a step in a recorded job.
SERIAL_OVERLAP_SHARE = 0.05


class ProcessGroup(msgspec.Struct):
    """A process group the trace names (Kineto's ``distributedInfo.pg_config``)."""

    name: str
    description: str
    size: int
    ranks: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "size": self.size,
                "ranks": self.ranks}


class StageStep(msgspec.Struct):
    """One step of a pipeline stage; times in µs."""

    step_us: float
    compute_us: float  # union of the rank's compute
    p2p_us: float  # union of its send/recv
    p2p_exposed_us: float  # send/recv with no compute running: the stage waits
    forward_micro_batches: int  # forward micro-batch ranges started in the step
    forwards_first: bool  # every forward micro-batch started before the first backward one
    # p2p_exposed_us split by phase: warm-up (until the first forward micro-batch ends),
    # cool-down (from the start of the last backward micro-batch), steady state between.
    warmup_wait_us: float = 0.0
    steady_wait_us: float = 0.0
    cooldown_wait_us: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"step_ms": self.step_us / 1000.0, "compute_ms": self.compute_us / 1000.0,
                "p2p_ms": self.p2p_us / 1000.0, "p2p_exposed_ms": self.p2p_exposed_us / 1000.0,
                "warmup_wait_ms": self.warmup_wait_us / 1000.0,
                "steady_wait_ms": self.steady_wait_us / 1000.0,
                "cooldown_wait_ms": self.cooldown_wait_us / 1000.0,
                "forward_micro_batches": self.forward_micro_batches}


class LayerComm(msgspec.Struct):
    """One FSDP unit (a module wrapped with ``fully_shard``): communication with no compute
    running while its hooks run, in µs over every step."""

    layer: str
    forward_gather_us: float = 0.0  # in FSDP::pre_forward: waiting for its all-gather
    backward_gather_us: float = 0.0  # in FSDP::pre_backward: its all-gather again
    reduce_scatter_us: float = 0.0  # in FSDP::post_backward_*: its reduce-scatter
    gathers: int = 0  # FSDP::all_gather ranges issued for it
    # Per all-gather of the layer, in forward and in backward: how many other layers finished
    # computing between its issue and the layer's use (0: issued just when needed).
    forward_distances: list[int] = field(default_factory=list)
    backward_distances: list[int] = field(default_factory=list)

    @property
    def exposed_us(self) -> float:
        return self.forward_gather_us + self.backward_gather_us + self.reduce_scatter_us

    @property
    def gather_us(self) -> float:
        return self.forward_gather_us + self.backward_gather_us

    @property
    def forward_prefetch_distance(self) -> float | None:
        """The median prefetch distance of its forward all-gathers."""
        return _median(self.forward_distances)

    @property
    def backward_prefetch_distance(self) -> float | None:
        return _median(self.backward_distances)

    @property
    def prefetched(self) -> bool:
        """Whether each of its all-gathers was issued at least one layer ahead."""
        seen = self.forward_distances + self.backward_distances
        return bool(seen) and min(seen) > 0

    def add(self, other: LayerComm) -> None:
        self.forward_gather_us += other.forward_gather_us
        self.backward_gather_us += other.backward_gather_us
        self.reduce_scatter_us += other.reduce_scatter_us
        self.gathers += other.gathers
        self.forward_distances += other.forward_distances
        self.backward_distances += other.backward_distances

    def to_dict(self, steps: int) -> dict[str, Any]:
        n = max(steps, 1) * 1000.0
        return {"layer": self.layer or "(root)",
                "forward_all_gather_exposed_ms_per_step": self.forward_gather_us / n,
                "backward_all_gather_exposed_ms_per_step": self.backward_gather_us / n,
                "reduce_scatter_exposed_ms_per_step": self.reduce_scatter_us / n,
                "all_gathers_per_step": self.gathers / max(steps, 1),
                "forward_prefetch_distance": self.forward_prefetch_distance,
                "backward_prefetch_distance": self.backward_prefetch_distance}


class FsdpQueues(msgspec.Struct):
    """Where a rank's FSDP all-gathers and gradient reductions (reduce-scatters, and the
    all-reduces gloo runs them as) run: the queues (a GPU stream, a host thread of the
    backend) and how long the two kinds ran at the same time, in µs over every step."""

    gather_queues: set[tuple[int, int]] = field(default_factory=set)  # (device, stream/thread)
    reduce_queues: set[tuple[int, int]] = field(default_factory=set)
    gather_us: float = 0.0  # the union of the all-gathers
    reduce_us: float = 0.0  # the union of the reductions
    overlap_us: float = 0.0  # both at once
    process_groups: int = 0  # the groups the trace's pg_config names (0: not recorded)

    @property
    def serialised(self) -> bool | None:
        """Whether all-gathers and reductions (almost) never ran at once: at most
        SERIAL_OVERLAP_SHARE of the shorter kind's time; None when the rank shows only one."""
        if not self.gather_us or not self.reduce_us:
            return None
        return self.overlap_us <= SERIAL_OVERLAP_SHARE * min(self.gather_us, self.reduce_us)

    def add(self, other: FsdpQueues) -> None:
        self.gather_queues |= other.gather_queues
        self.reduce_queues |= other.reduce_queues
        self.gather_us += other.gather_us
        self.reduce_us += other.reduce_us
        self.overlap_us += other.overlap_us
        self.process_groups = max(self.process_groups, other.process_groups)

    def to_dict(self, steps: int) -> dict[str, Any]:
        return {"serialised": self.serialised,
                "queues": len(self.gather_queues | self.reduce_queues),
                "shared_queues": len(self.gather_queues & self.reduce_queues),
                "all_gather_ms_per_step": self.gather_us / max(steps, 1) / 1000.0,
                "reduction_ms_per_step": self.reduce_us / max(steps, 1) / 1000.0,
                "gather_reduce_overlap_ms_per_step": self.overlap_us / max(steps, 1) / 1000.0,
                "process_groups": self.process_groups}


def _median(values: list[int]) -> float | None:
    return float(np.median(values)) if values else None


class Parallelism(msgspec.Struct):
    """What one rank shows of the job's parallelism (docs/parallelism.md)."""

    kinds: list[str]  # among KINDS
    evidence: dict[str, str]  # per kind: what in the trace showed it
    calls: dict[str, int]  # collective calls by type, over the step window
    process_groups: list[ProcessGroup]
    steps: int
    stage_steps: list[StageStep] = field(default_factory=list)  # pipeline ranks only
    micro_batches: int | None = None
    schedule: str | None = None  # "GPipe" (all forwards first) or "1F1B" (interleaved)
    stage: int | None = None  # the stage a multi-stage schedule names
    role: str | None = None  # "first", "middle" or "last" stage, from its sends and recvs
    layers: list[LayerComm] = field(default_factory=list)  # FSDP units, in first-seen order
    fsdp_queues: FsdpQueues | None = None  # FSDP ranks only
    tensor: TensorParallel | None = None  # tensor-parallel ranks only
    expert: ExpertComm | None = None  # ranks with all-to-all only

    @property
    def pipeline(self) -> bool:
        return "pipeline" in self.kinds and bool(self.stage_steps)

    def median_ms(self, name: str) -> float:
        """The median over steps of a StageStep figure, in ms."""
        values = [getattr(s, name) for s in self.stage_steps]
        return float(np.median(values)) / 1000.0 if values else 0.0

    def mean_ms(self, name: str) -> float:
        """The mean over steps of a StageStep figure, in ms."""
        values = [getattr(s, name) for s in self.stage_steps]
        return float(np.mean(values)) / 1000.0 if values else 0.0

    def fsdp_exposed_ms_per_step(self) -> float:
        return sum(x.exposed_us for x in self.layers) / max(self.steps, 1) / 1000.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kinds": self.kinds, "evidence": self.evidence, "calls": self.calls,
            "process_groups": [g.to_dict() for g in self.process_groups], "steps": self.steps,
        }
        if self.stage_steps:
            out["pipeline"] = {
                "micro_batches": self.micro_batches, "schedule": self.schedule,
                "stage": self.stage, "role": self.role,
                "compute_ms_per_step": self.median_ms("compute_us"),
                "step_ms": self.median_ms("step_us"),
                "p2p_exposed_ms_per_step": self.mean_ms("p2p_exposed_us"),
                "per_step": [s.to_dict() for s in self.stage_steps],
            }
        if self.layers:
            out["fsdp_layers"] = [x.to_dict(self.steps) for x in self.layers]
        if self.fsdp_queues is not None:
            out["fsdp_collectives"] = self.fsdp_queues.to_dict(self.steps)
        if self.tensor is not None:
            out["tensor"] = self.tensor.to_dict(self.steps)
        if self.expert is not None:
            out["expert"] = self.expert.to_dict(self.steps)
        return out

    def to_pandas(self) -> Any:
        """One row per FSDP layer, else per pipeline step, else per kind with its evidence."""
        if self.layers:
            return data_frame([x.to_dict(self.steps) for x in self.layers])
        if self.stage_steps:
            return data_frame([s.to_dict() for s in self.stage_steps])
        return data_frame([{"kind": k, "evidence": self.evidence[k]} for k in self.kinds])



class TensorLayer(msgspec.Struct):
    """The tensor-parallel collectives one layer issued or waited for (docs/parallelism.md), µs
    over every step: a layer is the innermost module or annotation range around them, else
    ``(backward)`` or ``(outside layers)``."""

    layer: str
    calls: int = 0  # collective calls (functional ops on the host, kernels on a GPU)
    comm_us: float = 0.0  # the union of their time
    exposed_us: float = 0.0  # of which no compute runs beside
    on_path_us: float = 0.0  # of which on the step's critical path (its steps only)

    def add(self, other: TensorLayer) -> None:
        self.calls += other.calls
        self.comm_us += other.comm_us
        self.exposed_us += other.exposed_us

    def to_dict(self, steps: int, path_steps: int) -> dict[str, Any]:
        n = max(steps, 1)
        return {"layer": self.layer, "calls_per_step": self.calls / n,
                "comm_ms_per_step": self.comm_us / n / 1000.0,
                "exposed_ms_per_step": self.exposed_us / n / 1000.0,
                "on_path_ms_per_step": self.on_path_us / max(path_steps, 1) / 1000.0}


class TensorSpans(msgspec.Struct):
    """Each tensor-parallel collective's time and where it ran, to meet the critical path:
    ``lane`` as the path names its lanes (``host thread T``, ``GPU D stream S``), ``layer`` an
    index into the section's layers. Not written to JSON."""

    lane: list[str] = field(default_factory=list)
    start_us: list[float] = field(default_factory=list)
    end_us: list[float] = field(default_factory=list)
    layer: list[str] = field(default_factory=list)

    def extend(self, other: TensorSpans) -> None:
        self.lane += other.lane
        self.start_us += other.start_us
        self.end_us += other.end_us
        self.layer += other.layer


class TensorParallel(msgspec.Struct):
    """A tensor-parallel rank's collectives per layer and their share of the critical path."""

    layers: list[TensorLayer]
    spans: TensorSpans = field(default_factory=TensorSpans)
    #: The critical path's steps (their replayed step time, summed) and the collectives' time
    #: on them: None where no path was drawn (analysis/parallelism/tensor.py ``on_path``).
    path_us: float | None = None
    on_path_us: float = 0.0
    path_steps: int = 0  # the steps the path was drawn for

    @property
    def comm_us(self) -> float:
        return sum(x.comm_us for x in self.layers)

    @property
    def exposed_us(self) -> float:
        return sum(x.exposed_us for x in self.layers)

    @property
    def on_path_pct(self) -> float | None:
        """The collectives' share of the critical path, in %."""
        if self.path_us is None:
            return None
        return 100.0 * self.on_path_us / self.path_us if self.path_us > 0 else 0.0

    def to_dict(self, steps: int) -> dict[str, Any]:
        n = max(steps, 1) * 1000.0
        k = max(self.path_steps, 1) * 1000.0
        return {"comm_ms_per_step": self.comm_us / n, "exposed_ms_per_step": self.exposed_us / n,
                "on_path_pct": self.on_path_pct, "on_path_ms_per_step": self.on_path_us / k,
                "path_ms_per_step": None if self.path_us is None else self.path_us / k,
                "path_steps": self.path_steps,
                "layers": [x.to_dict(steps, self.path_steps) for x in self.layers]}


class ExpertComm(msgspec.Struct):
    """A rank's all-to-all (expert parallelism's dispatch and combine, DeepEP's kernels
    included), µs over every step (docs/parallelism.md)."""

    all_to_all_us: float = 0.0  # the union of its all-to-all time
    exposed_us: float = 0.0  # of which no compute runs beside
    calls: int = 0  # all-to-all calls: the c10d calls where recorded, else its events
    on_device: bool = False

    def add(self, other: ExpertComm) -> None:
        self.all_to_all_us += other.all_to_all_us
        self.exposed_us += other.exposed_us
        self.calls += other.calls
        self.on_device = self.on_device or other.on_device

    @property
    def hidden_pct(self) -> float:
        """The share of the all-to-all time that compute runs beside (overlapped), in %."""
        a = self.all_to_all_us
        return 100.0 * (1.0 - self.exposed_us / a) if a > 0 else 0.0

    def to_dict(self, steps: int) -> dict[str, Any]:
        n = max(steps, 1) * 1000.0
        return {"all_to_all_ms_per_step": self.all_to_all_us / n,
                "exposed_ms_per_step": self.exposed_us / n, "hidden_pct": self.hidden_pct,
                "calls_per_step": self.calls / max(steps, 1)}
