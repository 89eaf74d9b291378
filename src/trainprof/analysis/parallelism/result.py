"""The parallelism section's records: what one rank shows of the job's parallelism, its
pipeline figures per step and its FSDP figures per layer (docs/parallelism.md). Their fields
are the JSON's figures (ms per step); the windows add up µs in sums.py."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.structs import Derived, Record

#: The kinds of parallelism, in the order they are named.
KINDS = ("fsdp", "pipeline", "tensor", "expert", "ddp")
#: FSDP's all-gathers and reductions count as serialised (one communicator running one at a
#: time) while they run at once for at most this share of the shorter kind's time: gloo's two
#: worker threads of one process group overlapped them 0.1 ms a step in a recorded job.
SERIAL_OVERLAP_SHARE = 0.05


class ProcessGroup(Record):
    """A process group the trace names (Kineto's ``distributedInfo.pg_config``)."""

    name: str
    description: str
    size: int
    ranks: list[int]


class StageStep(Record):
    """One step of a pipeline stage; times in ms. The JSON writes ``forward_micro_batches``
    last: the field keeps its place, which the cluster summary's encoding follows."""

    json_internal = frozenset({"forward_micro_batches"})
    json_derived = (Derived("forward_micro_batches", "cooldown_wait_ms"),)

    step_ms: float
    compute_ms: float  # union of the rank's compute
    p2p_ms: float  # union of its send/recv
    p2p_exposed_ms: float  # send/recv with no compute running: the stage waits
    forward_micro_batches: int  # forward micro-batch ranges started in the step
    # p2p_exposed_ms split by phase: warm-up (until the first forward micro-batch ends),
    # cool-down (from the start of the last backward micro-batch), steady state between.
    warmup_wait_ms: float = 0.0
    steady_wait_ms: float = 0.0
    cooldown_wait_ms: float = 0.0


class RankPipeline(Record):
    """What a pipeline rank shows: its schedule, its stage and each step's compute and waiting.
    The JSON writes ``per_step`` last, after the figures over steps: the field keeps its place,
    which the cluster summary's encoding follows."""

    json_internal = frozenset({"per_step"})
    json_derived = (Derived("compute_ms_per_step", "role"),
                    Derived("step_ms", "compute_ms_per_step"),
                    Derived("p2p_exposed_ms_per_step", "step_ms"),
                    Derived("per_step", "p2p_exposed_ms_per_step"))

    per_step: list[StageStep]
    micro_batches: int | None = None
    schedule: str | None = None  # "GPipe" (all forwards first) or "1F1B" (interleaved)
    stage: int | None = None  # the stage a multi-stage schedule names
    role: str | None = None  # "first", "middle" or "last" stage, from its sends and recvs

    def median_ms(self, name: str) -> float:
        """The median over steps of a StageStep figure (in ms)."""
        values = [getattr(s, name) for s in self.per_step]
        return float(np.median(values)) if values else 0.0

    def mean_ms(self, name: str) -> float:
        """The mean over steps of a StageStep figure (in ms)."""
        values = [getattr(s, name) for s in self.per_step]
        return float(np.mean(values)) if values else 0.0

    @property
    def compute_ms_per_step(self) -> float:
        return self.median_ms("compute_ms")

    @property
    def step_ms(self) -> float:
        return self.median_ms("step_ms")

    @property
    def p2p_exposed_ms_per_step(self) -> float:
        return self.mean_ms("p2p_exposed_ms")


class LayerComm(Record):
    """One FSDP unit (a module wrapped with ``fully_shard``): communication with no compute
    running while its hooks run, ms per step (sums.LayerSums adds it up)."""

    json_internal = frozenset({"layer", "forward_distances", "backward_distances"})
    json_derived = (Derived("layer", "", "label"),)

    layer: str  # "" for the root module (written "(root)")
    # in FSDP::pre_forward: waiting for its all-gather
    forward_gather_ms: float = field(default=0.0, name="forward_all_gather_exposed_ms_per_step")
    # in FSDP::pre_backward: its all-gather again
    backward_gather_ms: float = field(default=0.0,
                                      name="backward_all_gather_exposed_ms_per_step")
    # in FSDP::post_backward_*: its reduce-scatter
    reduce_scatter_ms: float = field(default=0.0, name="reduce_scatter_exposed_ms_per_step")
    gathers_per_step: float = field(default=0.0, name="all_gathers_per_step")
    #: The median prefetch distance of its forward (backward) all-gathers.
    forward_prefetch_distance: float | None = None
    backward_prefetch_distance: float | None = None
    # Not written to JSON: per all-gather of the layer, in forward and in backward, how many
    # other layers finished computing between its issue and the layer's use (0: issued just
    # when needed).
    forward_distances: list[int] = field(default_factory=list)
    backward_distances: list[int] = field(default_factory=list)

    @property
    def exposed_ms(self) -> float:
        return self.forward_gather_ms + self.backward_gather_ms + self.reduce_scatter_ms

    @property
    def gather_ms(self) -> float:
        return self.forward_gather_ms + self.backward_gather_ms

    @property
    def prefetched(self) -> bool:
        """Whether each of its all-gathers was issued at least one layer ahead."""
        seen = self.forward_distances + self.backward_distances
        return bool(seen) and min(seen) > 0

    @property
    def label(self) -> str:
        """The layer as the JSON names it: ``(root)`` for the root module."""
        return self.layer or "(root)"


class FsdpQueues(Record):
    """Where a rank's FSDP all-gathers and gradient reductions (reduce-scatters, and the
    all-reduces gloo runs them as) run: the queues (a GPU stream, a host thread of the
    backend) and how long the two kinds ran at the same time, ms per step (sums.QueueSums adds
    it up)."""

    json_internal = frozenset({"gather_queues", "reduce_queues"})
    json_derived = (Derived("serialised", ""),)

    queues: int = 0  # the queues either kind ran on
    shared_queues: int = 0  # those both kinds ran on
    gather_ms: float = field(default=0.0, name="all_gather_ms_per_step")  # the all-gathers' union
    reduce_ms: float = field(default=0.0, name="reduction_ms_per_step")  # the reductions'
    overlap_ms: float = field(default=0.0, name="gather_reduce_overlap_ms_per_step")  # both
    process_groups: int = 0  # the groups the trace's pg_config names (0: not recorded)
    # Not written to JSON: the queues, (device, stream) or (-1, thread).
    gather_queues: set[tuple[int, int]] = field(default_factory=set)
    reduce_queues: set[tuple[int, int]] = field(default_factory=set)

    @property
    def serialised(self) -> bool | None:
        """Whether all-gathers and reductions (almost) never ran at once: at most
        SERIAL_OVERLAP_SHARE of the shorter kind's time; None when the rank shows only one."""
        if not self.gather_ms or not self.reduce_ms:
            return None
        return self.overlap_ms <= SERIAL_OVERLAP_SHARE * min(self.gather_ms, self.reduce_ms)


class Parallelism(Record):
    """What one rank shows of the job's parallelism (docs/parallelism.md). Its JSON leaves out
    the parts the rank does not show."""

    json_omit_empty = frozenset({"pipeline", "fsdp_layers", "fsdp_collectives", "tensor",
                                 "expert"})

    kinds: list[str]  # among KINDS
    evidence: dict[str, str]  # per kind: what in the trace showed it
    calls: dict[str, int]  # collective calls by type, over the step window
    process_groups: list[ProcessGroup]
    steps: int
    pipeline: RankPipeline | None = None  # pipeline ranks only
    #: FSDP units, in first-seen order
    layers: list[LayerComm] = field(default_factory=list, name="fsdp_layers")
    fsdp_queues: FsdpQueues | None = field(default=None, name="fsdp_collectives")  # FSDP ranks
    tensor: TensorParallel | None = None  # tensor-parallel ranks only
    expert: ExpertComm | None = None  # ranks with all-to-all only

    def fsdp_exposed_ms_per_step(self) -> float:
        return sum(x.exposed_ms for x in self.layers)

    def to_pandas(self) -> Any:
        """One row per FSDP layer, else per pipeline step, else per kind with its evidence."""
        if self.layers:
            return data_frame([x.to_dict() for x in self.layers])
        if self.pipeline is not None:
            return data_frame([s.to_dict() for s in self.pipeline.per_step])
        return data_frame([{"kind": k, "evidence": self.evidence[k]} for k in self.kinds])


class TensorLayer(Record):
    """The tensor-parallel collectives one layer issued or waited for (docs/parallelism.md), ms
    per step: a layer is the innermost module or annotation range around them, else
    ``(backward)`` or ``(outside layers)`` (sums.TensorLayerSums adds it up)."""

    layer: str
    calls_per_step: float = 0.0  # collective calls (functional ops on the host, kernels on a GPU)
    comm_ms: float = field(default=0.0, name="comm_ms_per_step")  # the union of their time
    exposed_ms: float = field(default=0.0, name="exposed_ms_per_step")  # no compute beside
    #: of which on the step's critical path, per step the path was drawn for
    on_path_ms: float = field(default=0.0, name="on_path_ms_per_step")


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


class TensorParallel(Record):
    """A tensor-parallel rank's collectives per layer and their share of the critical path.
    The JSON writes ``path_ms_per_step`` after ``on_path_ms_per_step`` and ``layers`` last: the
    fields keep their places, which the cluster summary's encoding follows."""

    json_internal = frozenset({"layers", "path_ms", "spans"})
    json_derived = (Derived("comm_ms_per_step", "", "comm_ms"),
                    Derived("exposed_ms_per_step", "comm_ms_per_step", "exposed_ms"),
                    Derived("on_path_pct", "exposed_ms_per_step"),
                    Derived("path_ms_per_step", "on_path_ms_per_step", "path_ms"),
                    Derived("layers", "path_steps"))

    layers: list[TensorLayer]
    #: The critical path's step time and the collectives' time on it, per step the path was
    #: drawn for: None where no path was drawn (analysis/parallelism/tensor.py ``on_path``).
    path_ms: float | None = field(default=None, name="path_ms_per_step")
    on_path_ms: float = field(default=0.0, name="on_path_ms_per_step")
    path_steps: int = 0  # the steps the path was drawn for
    spans: TensorSpans = field(default_factory=TensorSpans)  # not written to JSON

    @property
    def comm_ms(self) -> float:
        return sum(x.comm_ms for x in self.layers)

    @property
    def exposed_ms(self) -> float:
        return sum(x.exposed_ms for x in self.layers)

    @property
    def on_path_pct(self) -> float | None:
        """The collectives' share of the critical path, in %."""
        if self.path_ms is None:
            return None
        return 100.0 * self.on_path_ms / self.path_ms if self.path_ms > 0 else 0.0


class ExpertComm(Record):
    """A rank's all-to-all (expert parallelism's dispatch and combine, DeepEP's kernels
    included), ms per step (docs/parallelism.md; sums.ExpertSums adds it up)."""

    json_derived = (Derived("hidden_pct", "exposed_ms_per_step"),)

    all_to_all_ms: float = field(default=0.0, name="all_to_all_ms_per_step")  # its union
    exposed_ms: float = field(default=0.0, name="exposed_ms_per_step")  # no compute beside
    #: all-to-all calls: the c10d calls where recorded, else its events
    calls_per_step: float = 0.0

    @property
    def hidden_pct(self) -> float:
        """The share of the all-to-all time that compute runs beside (overlapped), in %."""
        a = self.all_to_all_ms
        return 100.0 * (1.0 - self.exposed_ms / a) if a > 0 else 0.0


#: Parallelism's JSON keys written only when the rank shows that part.
