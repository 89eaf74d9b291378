"""What a window's part of the parallelism section adds up, in µs over the part: per FSDP
unit, the FSDP queues, per tensor-parallel layer and the all-to-all. The windows' sums are
added, then ``figures(steps)`` turns them into the section's records (result.py), per step."""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.parallelism.result import ExpertComm, FsdpQueues, LayerComm, TensorLayer


class LayerSums(msgspec.Struct):
    """One FSDP unit's communication with no compute running while its hooks run, µs."""

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

    def add(self, other: LayerSums) -> None:
        self.forward_gather_us += other.forward_gather_us
        self.backward_gather_us += other.backward_gather_us
        self.reduce_scatter_us += other.reduce_scatter_us
        self.gathers += other.gathers
        self.forward_distances += other.forward_distances
        self.backward_distances += other.backward_distances

    def figures(self, steps: int) -> LayerComm:
        n = max(steps, 1) * 1000.0
        return LayerComm(
            layer=self.layer, forward_gather_ms=self.forward_gather_us / n,
            backward_gather_ms=self.backward_gather_us / n,
            reduce_scatter_ms=self.reduce_scatter_us / n,
            gathers_per_step=self.gathers / max(steps, 1),
            forward_prefetch_distance=_median(self.forward_distances),
            backward_prefetch_distance=_median(self.backward_distances),
            forward_distances=self.forward_distances, backward_distances=self.backward_distances)


class QueueSums(msgspec.Struct):
    """Where a rank's FSDP all-gathers and gradient reductions ran (result.FsdpQueues), µs."""

    gather_queues: set[tuple[int, int]] = field(default_factory=set)  # (device, stream/thread)
    reduce_queues: set[tuple[int, int]] = field(default_factory=set)
    gather_us: float = 0.0  # the union of the all-gathers
    reduce_us: float = 0.0  # the union of the reductions
    overlap_us: float = 0.0  # both at once
    process_groups: int = 0  # the groups the trace's pg_config names (0: not recorded)

    def add(self, other: QueueSums) -> None:
        self.gather_queues |= other.gather_queues
        self.reduce_queues |= other.reduce_queues
        self.gather_us += other.gather_us
        self.reduce_us += other.reduce_us
        self.overlap_us += other.overlap_us
        self.process_groups = max(self.process_groups, other.process_groups)

    def figures(self, steps: int) -> FsdpQueues:
        n = max(steps, 1) * 1000.0
        return FsdpQueues(
            queues=len(self.gather_queues | self.reduce_queues),
            shared_queues=len(self.gather_queues & self.reduce_queues),
            gather_ms=self.gather_us / n, reduce_ms=self.reduce_us / n,
            overlap_ms=self.overlap_us / n, process_groups=self.process_groups,
            gather_queues=self.gather_queues, reduce_queues=self.reduce_queues)


class TensorLayerSums(msgspec.Struct):
    """The tensor-parallel collectives one layer issued or waited for (result.TensorLayer)."""

    layer: str
    calls: int = 0  # collective calls (functional ops on the host, kernels on a GPU)
    comm_us: float = 0.0  # the union of their time
    exposed_us: float = 0.0  # of which no compute runs beside

    def add(self, other: TensorLayerSums) -> None:
        self.calls += other.calls
        self.comm_us += other.comm_us
        self.exposed_us += other.exposed_us

    def figures(self, steps: int) -> TensorLayer:
        n = max(steps, 1)
        return TensorLayer(layer=self.layer, calls_per_step=self.calls / n,
                           comm_ms=self.comm_us / n / 1000.0,
                           exposed_ms=self.exposed_us / n / 1000.0)


class ExpertSums(msgspec.Struct):
    """A rank's all-to-all (result.ExpertComm), µs."""

    all_to_all_us: float = 0.0  # the union of its all-to-all time
    exposed_us: float = 0.0  # of which no compute runs beside
    calls: int = 0  # all-to-all calls: the c10d calls where recorded, else its events

    def add(self, other: ExpertSums) -> None:
        self.all_to_all_us += other.all_to_all_us
        self.exposed_us += other.exposed_us
        self.calls += other.calls

    def figures(self, steps: int) -> ExpertComm:
        n = max(steps, 1) * 1000.0
        return ExpertComm(all_to_all_ms=self.all_to_all_us / n, exposed_ms=self.exposed_us / n,
                          calls_per_step=self.calls / max(steps, 1))


def _median(values: list[int]) -> float | None:
    return float(np.median(values)) if values else None
