"""What an event is, decided once from its category and name, and the columnar trace it lives in.

Every analysis asks this module: "is this a kernel", "is this communication", "is this the
DataLoader". Old and new Kineto spellings (``Kernel``/``kernel``, ``Runtime``/``cuda_runtime``,
``Operator``/``cpu_op``), driver launches (``cuLaunchKernel``), AMD (``hip*``) and every NCCL,
RCCL and Gloo naming we know are mapped here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np


class Kind(IntEnum):
    """The kind of a complete (``ph: X``) event."""

    OTHER = 0
    CPU_OP = 1
    USER_ANNOTATION = 2
    GPU_ANNOTATION = 3
    PYTHON = 4
    RUNTIME = 5
    DRIVER = 6
    KERNEL = 7
    MEMCPY = 8
    MEMSET = 9
    SYNC = 10
    STEP = 11
    PROFILER_WINDOW = 12


#: Kinds that run on the device (a GPU stream), rather than on a host thread.
DEVICE_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET})
#: Kinds that launch device work from the host.
LAUNCH_KINDS = frozenset({Kind.RUNTIME, Kind.DRIVER})
#: Host kinds that count as CPU execution in the step breakdown.
HOST_KINDS = frozenset({Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON})

_CATEGORY_KIND = {
    "kernel": Kind.KERNEL,
    "memcpy": Kind.MEMCPY,
    "gpu_memcpy": Kind.MEMCPY,
    "memset": Kind.MEMSET,
    "gpu_memset": Kind.MEMSET,
    "runtime": Kind.RUNTIME,
    "cuda_runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "glow_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "hip_driver": Kind.DRIVER,
    "privateuse1_driver": Kind.DRIVER,
    "operator": Kind.CPU_OP,
    "cpu_op": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "python": Kind.PYTHON,
    "python_function": Kind.PYTHON,
    "cuda_sync": Kind.SYNC,
    "trace": Kind.PROFILER_WINDOW,
}

# Communication, recognised once. Kernels: NCCL (old ncclKernel_*, new ncclDevKernel_*),
# RCCL on AMD, and the generic "nccl" prefix of collective kernels. Host ops: the record-function
# names that torch.distributed emits for NCCL, Gloo, MPI and UCC, c10d ops and record_param_comms.
_COMM_KERNEL = re.compile(r"^(?:void )?(?:nccl|rccl|ncclx)", re.IGNORECASE)
_COMM_HOST = re.compile(
    r"^(?:nccl|gloo|mpi|ucc|xccl):|^c10d::|^record_param_comms$|^c10d_functional::"
    r"|^_c10d_functional::",
)
_DATALOADER = re.compile(r"^enumerate\((?:DataLoader|DataPipe)\)#")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER = re.compile(r"^Optimizer\.(?:step|zero_grad)#|^optimizer\.step|^## optimizer ##")
# The backward pass: autograd engine nodes, *Backward* functions, aten backward kernels, and the
# "## backward ##" annotation some training loops add.
_BACKWARD = re.compile(
    r"^autograd::engine::evaluate_function|Backward\d*$|^aten::\w+_backward|^## backward ##"
    r"|^CompiledFunctionBackward"
)


def classify(category: str, name: str) -> Kind:
    """The kind of a complete event with this category and name."""
    kind = _CATEGORY_KIND.get(category.lower(), Kind.OTHER)
    if kind in (Kind.CPU_OP, Kind.USER_ANNOTATION) and _STEP.match(name):
        return Kind.STEP
    return kind


def is_communication(kind: Kind, name: str) -> bool:
    """Whether an event is a collective or point-to-point communication (host op or kernel)."""
    if kind == Kind.KERNEL:
        return bool(_COMM_KERNEL.match(name))
    if kind in (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.GPU_ANNOTATION):
        return bool(_COMM_HOST.match(name))
    return False


def is_dataloader(kind: Kind, name: str) -> bool:
    """Whether a host event is the wait for the next batch (the plugin's DataLoader role)."""
    if kind not in (Kind.CPU_OP, Kind.USER_ANNOTATION):
        return False
    if name.startswith("enumerate(DataPipe)#"):
        return True
    return bool(_DATALOADER.match(name)) and name.endswith(".__next__")


def is_optimizer(kind: Kind, name: str) -> bool:
    """Whether a host event is an optimizer step or zero_grad annotation."""
    return kind in (Kind.CPU_OP, Kind.USER_ANNOTATION) and bool(_OPTIMIZER.match(name))


def is_backward(kind: Kind, name: str) -> bool:
    """Whether a host event belongs to the backward pass."""
    return kind in (Kind.CPU_OP, Kind.USER_ANNOTATION) and bool(_BACKWARD.search(name))


def step_number(name: str) -> int | None:
    """The N of ``ProfilerStep#N``, or None."""
    match = _STEP.match(name)
    return int(match.group(1)) if match else None


#: Name flags, bit values of ``Events.flags``.
FLAG_COMM = 1
FLAG_DATALOADER = 2
FLAG_OPTIMIZER = 4
FLAG_BACKWARD = 8


def name_flags(kind: Kind, name: str) -> int:
    """The FLAG_* bits of an event with this kind and name."""
    return (
        (FLAG_COMM if is_communication(kind, name) else 0)
        | (FLAG_DATALOADER if is_dataloader(kind, name) else 0)
        | (FLAG_OPTIMIZER if is_optimizer(kind, name) else 0)
        | (FLAG_BACKWARD if is_backward(kind, name) else 0)
    )


@dataclass
class Events:
    """Complete events as columns, sorted by start time. Times are µs from ``Trace.t0_us``.

    ``name`` indexes ``names``; ``correlation`` and ``external_id`` are -1 when absent;
    ``device`` and ``stream`` are -1 for host events; ``tid`` indexes ``Trace.threads``.
    """

    kind: np.ndarray  # uint8, a Kind
    name: np.ndarray  # int32 into names
    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    tid: np.ndarray  # int32 into Trace.threads
    device: np.ndarray  # int16
    stream: np.ndarray  # int64
    correlation: np.ndarray  # int64
    external_id: np.ndarray  # int64
    blocks_per_sm: np.ndarray  # float32, nan when absent
    occupancy: np.ndarray  # float32, est. achieved occupancy %, nan when absent
    nbytes: np.ndarray  # float64, bytes moved by a memcpy/memset, nan when absent
    flags: np.ndarray  # uint8, FLAG_* derived from the name
    flops: np.ndarray  # float64, the op's FLOPs when recorded with_flops, nan otherwise
    shape: np.ndarray  # int32 into shapes (the op's "Input Dims" as JSON), -1 when absent
    stack: np.ndarray  # int32 into stacks (the "Call stack" string), -1 when absent
    detail: np.ndarray  # int32 into details (launch configuration, collective metadata), -1
    names: list[str]
    shapes: list[str] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Boolean mask of events of any of these kinds."""
        if len(kinds) == 1:
            return self.kind == kinds[0]
        return np.isin(self.kind, np.array(kinds, dtype=np.uint8))

    def flagged(self, flag: int) -> np.ndarray:
        return (self.flags & flag) != 0


@dataclass
class MemoryEvents:
    """``[memory]`` instant events as columns (µs from ``Trace.t0_us``)."""

    ts: np.ndarray  # float64
    device_type: np.ndarray  # int8: 0 CPU, 1 CUDA, others as Kineto numbers them
    device_id: np.ndarray  # int16
    nbytes: np.ndarray  # float64, + allocation, - free
    total_allocated: np.ndarray  # float64, nan in old traces
    total_reserved: np.ndarray  # float64, nan in old traces
    addr: np.ndarray  # float64 (addresses exceed int64 on some platforms), nan when absent

    def __len__(self) -> int:
        return len(self.ts)


@dataclass
class Flows:
    """Flow events (``ac2g`` launch links and ``fwdbwd``) as columns."""

    id: np.ndarray  # int64
    phase: np.ndarray  # uint8: 0 start ('s'), 1 finish ('f'/'t')
    ts: np.ndarray  # float64 µs from t0
    tid: np.ndarray  # int32 into Trace.threads
    forward_backward: np.ndarray  # bool: fwdbwd rather than ac2g/async launch

    def __len__(self) -> int:
        return len(self.ts)


@dataclass
class Trace:
    """One recorded window of one rank, ready for analysis."""

    path: Path
    rank: int
    window: int
    t0_us: float
    events: Events
    memory: MemoryEvents
    flows: Flows
    #: (pid, tid) per thread index, as they appear in the file (strings or integers).
    threads: list[tuple[Any, Any]]
    metadata: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @cached_property
    def device_properties(self) -> list[dict[str, Any]]:
        """``deviceProperties`` (or the legacy ``computeProperties``), normalised keys."""
        props = self.metadata.get("deviceProperties") or self.metadata.get("computeProperties")
        out = []
        for p in props or []:
            if not isinstance(p, dict):
                continue
            q = dict(p)
            q.setdefault("computeMajor", p.get("major"))
            q.setdefault("computeMinor", p.get("minor"))
            out.append(q)
        return out

    @cached_property
    def devices(self) -> list[int]:
        """Device ids that ran kernels, memcpys or memsets."""
        ev = self.events
        mask = ev.of_kind(*DEVICE_KINDS) & (ev.device >= 0)
        return sorted(int(d) for d in np.unique(ev.device[mask]))

    @property
    def has_gpu(self) -> bool:
        return bool(self.devices)

    def device_name(self) -> str:
        """A short human label for the device this rank used: the GPU's name, or "CPU"."""
        if not self.has_gpu:
            return "CPU"
        props = {p.get("id"): p for p in self.device_properties}
        first = self.devices[0]
        name = (props.get(first) or {}).get("name")
        return str(name) if name else f"GPU {first}"

    def num_sms(self, device: int) -> int | None:
        for p in self.device_properties:
            if p.get("id") == device:
                sms = p.get("numSms") or p.get("multiProcessorCount")
                return int(sms) if sms else None
        return None

    def compute_capability(self, device: int) -> tuple[int, int] | None:
        for p in self.device_properties:
            if p.get("id") == device and p.get("computeMajor") is not None:
                return int(p["computeMajor"]), int(p.get("computeMinor") or 0)
        return None
