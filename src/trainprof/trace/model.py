"""What an event is, decided once from its category and name, and the columnar trace it lives in.

Every analysis asks this module: "is this a kernel", "is this communication", "is this the
DataLoader". Old and new Kineto spellings (``Kernel``/``kernel``, ``Runtime``/``cuda_runtime``,
``Operator``/``cpu_op``), driver launches (``cuLaunchKernel``), AMD (``hip*``) and every NCCL,
RCCL and Gloo naming we know are mapped here and nowhere else.
"""

from __future__ import annotations

import functools
import re
from enum import IntEnum
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.lazy import LazyPattern
from trainprof.trace.kernel_class import is_communication_kernel
from trainprof.vocabulary import COMM_BACKENDS


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
#: Kinds that nest by time on a host thread: the call tree of ops, annotations, Python frames,
#: steps, and the launch/runtime calls at its leaves.
CALL_TREE_KINDS = frozenset({*HOST_KINDS, Kind.STEP, *LAUNCH_KINDS})

_CATEGORY_KIND = {
    "kernel": Kind.KERNEL,
    "memcpy": Kind.MEMCPY,
    "gpu_memcpy": Kind.MEMCPY,
    "memset": Kind.MEMSET,
    "gpu_memset": Kind.MEMSET,
    # MTIA's on-device events (Kineto: "MTIA ondevice CCP events", written as kernels).
    "mtia_ccp_events": Kind.KERNEL,
    "runtime": Kind.RUNTIME,
    "cuda_runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "hpu_op": Kind.RUNTIME,  # Gaudi: the host-side launch of a device op
    "gcu_runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "glow_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "hip_driver": Kind.DRIVER,
    "privateuse1_driver": Kind.DRIVER,
    "xpu_driver": Kind.DRIVER,
    "gcu_driver": Kind.DRIVER,
    "operator": Kind.CPU_OP,
    "cpu_op": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "python": Kind.PYTHON,
    "python_function": Kind.PYTHON,
    "cuda_sync": Kind.SYNC,
    "trace": Kind.PROFILER_WINDOW,
}

# Communication, recognised once. Kernels: trace/kernel_class.py (NCCL, RCCL, NVSHMEM, DeepEP,
# custom all-reduce ...; kernels of unknown names launched under a collective are flagged by
# trace/kernel_context.py as the trace loads). Host ops: the record-function names that
# torch.distributed emits for its backends (vocabulary.COMM_BACKENDS: the same list decides
# what a collective is below), c10d ops and record_param_comms.
_BACKENDS = "|".join(COMM_BACKENDS)
_COMM_HOST = LazyPattern(
    rf"^(?:{_BACKENDS}):|^c10d::|^record_param_comms$|^c10d_functional::"
    r"|^_c10d_functional::|^symm_mem::",  # torch symmetric-memory collectives
)
_DATALOADER = LazyPattern(r"^enumerate\((?:DataLoader|DataPipe)\)#")
_STEP = LazyPattern(r"^ProfilerStep#(\d{1,18})$")  # a number that fits in 64 bits
_OPTIMIZER = LazyPattern(r"^Optimizer\.(?:step|zero_grad)#|^optimizer\.step|^## optimizer ##")
# The backward pass: autograd engine nodes, *Backward* functions, aten backward kernels, and the
# "## backward ##" annotation some training loops add.
_BACKWARD = LazyPattern(
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
        return is_communication_kernel(name)
    if kind in (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.GPU_ANNOTATION):
        return bool(_COMM_HOST.match(name))
    return False


# CUDA/HIP graph replays: one host call starts every kernel of the graph.
_GRAPH_LAUNCH = LazyPattern(r"^(?:cuda|hip)GraphLaunch|^cuGraphLaunch")


def is_graph_launch(kind: Kind, name: str) -> bool:
    """Whether a runtime/driver call replays a CUDA or HIP graph (``cudaGraphLaunch``...)."""
    return kind in LAUNCH_KINDS and bool(_GRAPH_LAUNCH.match(name))


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


# Operators: wrappers the operator table leaves out, as the TensorBoard plugin did (the DataLoader
# and optimizer wrappers are left out through FLAG_DATALOADER and FLAG_OPTIMIZER).
_WRAPPER_OPS = frozenset({"DataParallel.forward", "DistributedDataParallel.forward"})


def is_operator_row(kind: Kind, name: str) -> bool:
    """Whether a host event is listed in the operator table (a CPU op, not a step or wrapper)."""
    return (
        kind == Kind.CPU_OP
        and name not in _WRAPPER_OPS
        and not is_dataloader(kind, name)
        and not is_optimizer(kind, name)
    )


# Host calls that block the CPU until the device catches up: CUDA runtime and driver, and HIP.
# Plain (non-Async) memcpy calls are synchronous with the host.
_SYNC_CALLS = (
    ("device", LazyPattern(r"^(?:cuda|hip)(?:Device|Thread)Synchronize$|^cuCtxSynchronize$")),
    ("stream", LazyPattern(r"^(?:cuda|hip)StreamSynchronize$|^cuStreamSynchronize$")),
    ("event", LazyPattern(r"^(?:cuda|hip)EventSynchronize$|^cuEventSynchronize$")),
    ("memcpy", LazyPattern(
        r"^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol|DtoH|HtoD|DtoD)?$"
        r"|^cuMemcpy(?:DtoH|HtoD|DtoD|2D|3D|Peer)?(?:_v2)?$")),
)
#: Every value ``sync_call_kind`` returns.
SYNC_KINDS = tuple(kind for kind, _ in _SYNC_CALLS)
# ``cuda_sync`` events (CUPTI synchronisation records) that block the host; "Stream Wait Event"
# is a wait of one stream on another on the device, and never blocks the host.
_HOST_BLOCKING_SYNC_EVENTS = {"Context Sync": "device", "Stream Sync": "stream",
                              "Event Sync": "event"}


def sync_call_kind(kind: Kind, name: str) -> str | None:
    """"device", "stream", "event" or "memcpy" for a host call that blocks on the device."""
    if kind in LAUNCH_KINDS:
        for label, pattern in _SYNC_CALLS:
            if pattern.match(name):
                return label
    elif kind == Kind.SYNC:
        return _HOST_BLOCKING_SYNC_EVENTS.get(name)
    return None


# Host ops known to make the CPU wait for the device, and why (the words the report uses).
_SYNC_CAUSES = (
    (LazyPattern(r"^aten::(?:item|_local_scalar_dense)$"), "reads a tensor value on the host"),
    (LazyPattern(r"^aten::is_nonzero$"), "tensor truth value (if tensor: ...)"),
    (LazyPattern(r"^aten::(?:nonzero|masked_select|_unique2?|unique_\w+|unique_consecutive"
                 r"|repeat_interleave|argwhere|masked_scatter)$"),
     "output size depends on the data"),
    (LazyPattern(r"^aten::(?:to|_to_copy|copy_|cpu|tolist)$"), "copies to the host"),
    (LazyPattern(r"^aten::(?:equal|allclose)$"), "compares on the host"),
)


def sync_cause(name: str) -> str | None:
    """Why a host op syncs with the device, when it is one of the known culprits."""
    for pattern, why in _SYNC_CAUSES:
        if pattern.match(name):
            return why
    return None


# Call-stack frames ("path/file.py(123): function") inside PyTorch and the training frameworks,
# trainprof itself (`trainprof run`'s runner and its profiler's `step` wrap the user's code) and
# interpreter built-ins: the source line reported is the first frame that is none of these.
_FRAME = LazyPattern(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<function>.*)$")


@functools.cache
def trainprof_frame() -> re.Pattern[str]:
    """A frame's file in trainprof's own modules, wherever it is installed: ``trainprof/``
    followed by one of the package's own entries (a clone named trainprof with the user's
    ``examples/`` is not one). Built on first use: it lists the package's folder."""
    own = sorted({p.stem for p in Path(__file__).resolve().parents[1].iterdir()
                  if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())})
    return re.compile(
        r"(?:^|[/\\])trainprof[/\\](?:" + "|".join(map(re.escape, own)) + r")(?:[/\\.]|$)")


@functools.cache
def _library_frame() -> re.Pattern[str]:
    """A frame in PyTorch, a training framework, trainprof or an interpreter built-in."""
    return re.compile(
        r"(?:^|[/\\])(?:torch|functorch|triton|torchvision|torchaudio|accelerate|lightning"
        r"|pytorch_lightning|lightning_fabric)[/\\]|^<(?:built-in|frozen )|^<string>"
        r"|" + trainprof_frame().pattern
    )


def split_frame(frame: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a frame such as ``path/train.py(42): step``, else None."""
    match = _FRAME.match(frame.strip())
    return (match["file"], int(match["line"]), match["function"]) if match else None


def is_source_frame(frame: str) -> bool:
    """Whether a call-stack frame is a line of the user's code (not torch, not a built-in)."""
    frame = frame.strip()
    return bool(_FRAME.match(frame)) and not _library_frame().search(frame)


def step_number(name: str) -> int | None:
    """The N of ``ProfilerStep#N``, or None."""
    match = _STEP.match(name)
    return int(match.group(1)) if match else None


# Collective types, recognised once from host op names (``nccl:all_reduce``, ``gloo:broadcast``,
# ``c10d::allreduce_``), ``record_param_comms``' "Collective name" (``allreduce``,
# ``_allgather_base``) and kernel names (``ncclKernel_AllReduce_RING_LL_Sum_float``,
# ``ncclDevKernel_ReduceScatter_Sum_f32``). Letters only are compared, so ``all_reduce``,
# ``allreduce`` and ``AllReduce`` agree; the more specific word is tried first.
_COLLECTIVE_WORDS = (
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("allreduce", "all_reduce"),
    ("alltoall", "all_to_all"),
    ("dispatch", "all_to_all"),  # expert-parallel token exchange (DeepEP dispatch/combine)
    ("combine", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("barrier", "barrier"),
    ("send", "send"),
    ("recv", "recv"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
    ("wait", "wait"),
)
#: Every value ``collective_type`` returns.
COLLECTIVE_TYPES = (*dict.fromkeys(t for _, t in _COLLECTIVE_WORDS), "other")
_NOT_LETTER = LazyPattern(r"[^a-z]")
# Host ops of the backend itself (the collective as it runs), rather than the c10d dispatch
# wrappers (``c10d::allreduce_``, ``record_param_comms``) around them.
_BACKEND_COLLECTIVE = LazyPattern(rf"^(?:{_BACKENDS}):")


def collective_type(name: str) -> str:
    """The collective a communication name stands for (one of COLLECTIVE_TYPES)."""
    head = name.split("(", 1)[0].lower()
    for prefix in ("ncclkernel_", "nccldevkernel_", "rcclkernel_"):
        head = head.replace(prefix, "")
    letters = _NOT_LETTER.sub("", head.split("::")[-1].split(":")[-1])
    for word, kind in _COLLECTIVE_WORDS:
        if word in letters:
            return kind
    return "other"


def is_backend_collective(kind: Kind, name: str) -> bool:
    """A host range recorded by the communication backend (``nccl:*``, ``gloo:*``, ...)."""
    return kind in (Kind.CPU_OP, Kind.USER_ANNOTATION) and bool(_BACKEND_COLLECTIVE.match(name))


# Element sizes of the dtypes record_param_comms names (c10 ScalarType names and torch names).
_DTYPE_BYTES = {
    "double": 8, "float64": 8, "long": 8, "int64": 8, "complexfloat": 8, "complex64": 8,
    "complexdouble": 16, "complex128": 16, "uint64": 8,
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4,
    "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2, "uint16": 2,
    "char": 1, "int8": 1, "byte": 1, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


def dtype_bytes(dtype: object) -> int | None:
    """Bytes per element of a collective's ``dtype`` ("Float", "BFloat16", ...), or None."""
    if not isinstance(dtype, str):
        return None
    key = dtype.lower().removeprefix("torch.").removeprefix("c10::")
    return _DTYPE_BYTES.get(key)


# Copies: CUPTI names them "Memcpy <kind> (<src memory> -> <dst memory>)", e.g.
# "Memcpy HtoD (Pageable -> Device)"; ROCm traces say "CopyHostToDevice" and the like.
_MEMCPY_KIND = LazyPattern(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH|HtoA|AtoH|AtoA|AtoD|DtoA)\b")
_ROCM_COPY = {"copyhosttodevice": "HtoD", "copydevicetohost": "DtoH",
              "copydevicetodevice": "DtoD", "copyhosttohost": "HtoH"}
#: Directions ``memcpy_direction`` returns ("other" for array copies and unknown names).
MEMCPY_DIRECTIONS = ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH", "other")


def memcpy_direction(name: str) -> str:
    """HtoD, DtoH, DtoD, PtoP (peer to peer), HtoH, or "other", from a memcpy's name."""
    match = _MEMCPY_KIND.search(name)
    if match:
        kind = match.group(1)
        return kind if kind in MEMCPY_DIRECTIONS else "other"
    return _ROCM_COPY.get(_NOT_LETTER.sub("", name.lower()), "other")


def memcpy_host_memory(name: str) -> str | None:
    """"pageable" or "pinned" for the host side of a copy when its name says, else None."""
    lower = name.lower()
    if "pageable" in lower:
        return "pageable"
    if "pinned" in lower:
        return "pinned"
    return None


# Ops that only allocate (the caching allocator's callers): memory is attributed to the op
# that called them, as the TensorBoard plugin showed "<parent> (aten::empty)".
_ALLOCATION_OP = LazyPattern(
    r"^aten::(?:empty|empty_strided|empty_like|new_empty|new_empty_strided|resize_)$"
)


def is_allocation_op(name: str) -> bool:
    """Whether a host op does nothing but allocate (``aten::empty`` and its kin)."""
    return bool(_ALLOCATION_OP.match(name))


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


class Events(msgspec.Struct, dict=True):
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
    op_args: np.ndarray  # int32 into op_arg_texts ([Input type, Concrete Inputs]), -1 if none
    names: list[str]
    shapes: list[str] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    op_arg_texts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Boolean mask of events of any of these kinds."""
        if not kinds:
            return np.zeros(len(self.kind), dtype=bool)
        if len(kinds) == 1:
            return self.kind == kinds[0]
        # One comparison per kind, or'ed: much cheaper than np.isin on millions of events.
        mask = self.kind == kinds[0]
        for k in kinds[1:]:
            mask |= self.kind == k
        return mask

    def flagged(self, flag: int) -> np.ndarray:
        return (self.flags & flag) != 0


class MemoryEvents(msgspec.Struct):
    """``[memory]`` instant events as columns (µs from ``Trace.t0_us``)."""

    ts: np.ndarray  # float64
    device_type: np.ndarray  # int8: 0 CPU, 1 CUDA, others as Kineto numbers them
    device_id: np.ndarray  # int16
    nbytes: np.ndarray  # float64, + allocation, - free
    total_allocated: np.ndarray  # float64, nan in old traces
    total_reserved: np.ndarray  # float64, nan in old traces
    addr: np.ndarray  # float64 (addresses exceed int64 on some platforms), nan when absent
    tid: np.ndarray  # int32 into Trace.threads: the thread that allocated or freed

    def __len__(self) -> int:
        return len(self.ts)


class Flows(msgspec.Struct):
    """Flow events (``ac2g`` launch links and ``fwdbwd``) as columns."""

    id: np.ndarray  # int64
    phase: np.ndarray  # uint8: 0 start ('s'), 1 finish ('f'/'t')
    ts: np.ndarray  # float64 µs from t0
    tid: np.ndarray  # int32 into Trace.threads
    forward_backward: np.ndarray  # bool: fwdbwd rather than ac2g/async launch

    def __len__(self) -> int:
        return len(self.ts)


class Trace(msgspec.Struct, dict=True):
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
        for p in props if isinstance(props, list) else []:
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
