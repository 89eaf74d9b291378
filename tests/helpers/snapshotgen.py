"""Memory snapshots built in the tests, in `torch.cuda.memory._snapshot`'s documented format.

`SnapshotBuilder` lays out segments and blocks by hand (known fragmentation, known sites);
`AllocatorReplay` runs allocations and frees through a toy allocator that writes the history
(`device_traces`, `external_annotations`) and ends with matching segments and blocks;
`cuda_stack` and `real_shaped_run` give them the stacks real CUDA runs record (C++ frames
interleaved with Python ones) and a training run's allocations.
"""

from __future__ import annotations

from typing import Any

MiB = 1 << 20
TORCH_LINEAR = ("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward")
TORCH_MODULE = ("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1762, "_call_impl")


def frames(*stack: tuple[str, int, str]) -> list[dict[str, Any]]:
    """A stack, innermost first, as snapshot frames."""
    return [{"filename": f, "line": line, "name": name} for f, line, name in stack]


class SnapshotBuilder:
    """Segments of blocks laid out by hand; each segment's blocks must fill it."""

    def __init__(self) -> None:
        self.segments: list[dict[str, Any]] = []
        self.device_traces: list[list[dict[str, Any]]] = [[]]
        self.annotations: list[dict[str, Any]] = []
        self._next_address = 0x7F0000000000

    def segment(self, blocks: list[tuple[int, str] | tuple[int, str, list[dict[str, Any]]]],
                kind: str = "large", device: int = 0, requested: dict[int, int] | None = None
                ) -> dict[str, Any]:
        """A segment of `(size, state[, frames])` blocks, in address order."""
        address = self._next_address
        total = sum(b[0] for b in blocks)
        out_blocks = []
        for i, block in enumerate(blocks):
            size, state = block[0], block[1]
            out_blocks.append({
                "address": address, "size": size, "state": state,
                "requested_size": (requested or {}).get(i, size if state != "inactive" else 0),
                "frames": block[2] if len(block) > 2 else []})
            address += size
        active = [b for b in out_blocks if b["state"] != "inactive"]
        seg = {"device": device, "address": self._next_address, "total_size": total,
               "allocated_size": sum(b["size"] for b in active if b["state"] == "active_allocated"),
               "active_size": sum(b["size"] for b in active),
               "requested_size": sum(b["requested_size"] for b in active), "stream": 0,
               "segment_type": kind, "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": [], "blocks": out_blocks}
        self._next_address = address + (1 << 30)
        self.segments.append(seg)
        return seg

    def trace(self, action: str, size: int, addr: int = 0, time_us: int = 0, device: int = 0,
              **extra: Any) -> None:
        while len(self.device_traces) <= device:
            self.device_traces.append([])
        entry = {"action": action, "size": size, "stream": 0, "time_us": time_us, "frames": [], **extra}
        entry["device_free" if action == "oom" else "addr"] = extra.get("device_free", addr)
        self.device_traces[device].append(entry)

    def snapshot(self) -> dict[str, Any]:
        return {"segments": self.segments, "device_traces": self.device_traces,
                "external_annotations": self.annotations,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False}}


class AllocatorReplay:
    """A toy first-fit allocator over one large segment; at the end, the live blocks with the
    free space between them as inactive blocks."""

    def __init__(self, segment_size: int = 512 * MiB, device: int = 0) -> None:
        self.builder = SnapshotBuilder()
        self.device = device
        self.segment_size = segment_size
        self.time_us = 1_000
        self.live: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        self.builder.trace("segment_alloc", segment_size, 0, self.time_us, device)

    def start_history(self) -> None:
        """History recording begins now: what is live stays, the entries so far are dropped."""
        self.builder.device_traces[self.device].clear()

    def alloc(self, size: int, stack: list[dict[str, Any]] | None = None) -> int:
        """First fit: the lowest free address where `size` bytes fit."""
        assert size > 0
        self.time_us += 10
        at = 0
        for start in sorted(self.live):
            if start - at >= size:
                break
            at = start + self.live[start][0]
        addr = at
        assert addr + size <= self.segment_size, "the toy segment is full"
        self.live[addr] = (size, stack or [])
        self.builder.trace("alloc", size, addr, self.time_us, self.device, frames=stack or [])
        return addr

    def free(self, addr: int, free_stack: list[dict[str, Any]] | None = None) -> None:
        """Frees a block; its entries carry `free_stack` (the stack of the free, as
        `context="all"` records it) or else the stack that allocated it."""
        size, stack = self.live.pop(addr)
        stack = stack if free_stack is None else free_stack
        for action in ("free_requested", "free_completed"):
            self.time_us += 5
            self.builder.trace(action, size, addr, self.time_us, self.device, frames=stack)

    def step(self, number: int, work) -> None:
        """Runs `work()` inside `ProfilerStep#number` annotations."""
        self.time_us += 100
        self.builder.annotations.append({"name": f"ProfilerStep#{number}", "stage": "START",
                                         "device": self.device, "time_us": self.time_us})
        work()
        self.time_us += 100
        self.builder.annotations.append({"name": f"ProfilerStep#{number}", "stage": "END",
                                         "device": self.device, "time_us": self.time_us})

    def snapshot(self, history: bool = True) -> dict[str, Any]:
        blocks, at = [], 0
        for addr in sorted(self.live):
            if addr > at:
                blocks.append((addr - at, "inactive"))
            size, stack = self.live[addr]
            blocks.append((size, "active_allocated", stack))
            at = addr + size
        if at < self.segment_size:
            blocks.append((self.segment_size - at, "inactive"))
        self.builder.segment(blocks, device=self.device)
        snap = self.builder.snapshot()
        if not history:
            snap["device_traces"] = [[]]
        return snap


# Stacks as `torch.cuda.memory._record_memory_history()` records them at its defaults
# (`context="all"`, `stacks="all"`): C++ frames with the Python frames interleaved, innermost
# first. Field names and order from torch 2.13 (torch/cuda/memory.py `_snapshot`'s docstring;
# torch/csrc/cuda/Module.cpp `_cuda_memorySnapshot`,
# frames symbolised by torch/csrc/profiler/combined_traceback.cpp `symbolize`, which puts each
# Python frame just before the `_PyEval_EvalFrameDefault` that ran it); the frames themselves
# (`??` files with line 0, bare `.cpp` names, CPython's C functions between Python frames) as
# seen in five real CUDA snapshots of training runs (reported in issue 25).
SITE_PACKAGES = "/home/u/.venv/lib/python3.11/site-packages"
ALLOCATOR_FRAMES = (
    ("??", 0, "torch::unwind::unwind()"),
    ("memory_snapshot.cpp", 0, "torch::cuda::(anonymous namespace)::gather_with_cpp()"),
    ("CUDACachingAllocator.cpp", 0,
     "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, "
     "unsigned long, CUstream_st*)"),
    ("CUDACachingAllocator.cpp", 0,
     "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
    ("??", 0, "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, "
              "c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, "
              "std::optional<c10::MemoryFormat>)"),
    ("??", 0, "at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, "
              "std::optional<c10::Device>, std::optional<c10::MemoryFormat>)"),
    ("RegisterCUDA.cpp", 0, "at::(anonymous namespace)::(anonymous namespace)::"
                            "wrapper_CUDA_memory_format_empty(c10::ArrayRef<c10::SymInt>, ...)"),
    ("??", 0, "at::_ops::empty_memory_format::redispatch(c10::DispatchKeySet, ...)"),
)
BINDING_FRAMES = (
    ("??", 0, "at::_ops::zeros_like::call(at::Tensor const&, ...)"),
    ("python_torch_functions_0.cpp", 0,
     "torch::autograd::THPVariable_zeros_like(_object*, _object*, _object*)"),
    ("??", 0, "cfunction_call"),
    ("??", 0, "_PyObject_MakeTpCall"),
)
EVAL_FRAME = ("??", 0, "_PyEval_EvalFrameDefault")
INTERPRETER_BOTTOM = (
    ("??", 0, "PyEval_EvalCode"), ("??", 0, "run_eval_code_obj"), ("??", 0, "run_mod"),
    ("??", 0, "pyrun_file"), ("??", 0, "_PyRun_SimpleFileObject"),
    ("??", 0, "_PyRun_AnyFileObject"), ("??", 0, "pymain_run_file"), ("??", 0, "Py_RunMain"),
    ("??", 0, "Py_BytesMain"), ("??", 0, "__libc_start_main"), ("??", 0, "_start"),
)
AUTOGRAD_THREAD = (
    ("??", 0, "at::native::mm(at::Tensor const&, at::Tensor const&)"),
    ("??", 0, "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)"),
    ("??", 0, "torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"),
    ("??", 0, "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::"
              "GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, ...)"),
    ("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::"
              "GraphTask> const&)"),
    ("??", 0, "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::"
              "ReadyQueue> const&, bool)"),
    ("??", 0, "execute_native_thread_routine"), ("??", 0, "start_thread"), ("??", 0, "clone3"),
)


def cuda_stack(*python: tuple[str, int, str], stacks: str = "all") -> list[dict[str, Any]]:
    """The frames of one allocation made by the Python frames `python` (innermost first) as a
    snapshot records them: with `stacks="all"` the allocator's C++ frames first, each Python
    frame followed by its interpreter frame, and the interpreter's start at the bottom; with
    `stacks="python"` the Python frames alone."""
    if stacks == "python":
        return frames(*python)
    out = [*ALLOCATOR_FRAMES, *BINDING_FRAMES]
    for frame in python:
        out += [frame, EVAL_FRAME, ("??", 0, "_PyFunction_Vectorcall")]
    return frames(*out, *INTERPRETER_BOTTOM)


def autograd_thread_stack() -> list[dict[str, Any]]:
    """An allocation of the autograd engine's device thread with `stacks="all"`: C++ only."""
    return frames(*ALLOCATOR_FRAMES, *AUTOGRAD_THREAD)


GiB = 1 << 30
#: The training run of `real_shaped_run`: its user files and the sizes of what it holds.
USER_TRAIN = ("/home/u/proj/train.py", 118, "train")
USER_FORWARD = ("/home/u/proj/cs336_basics/model.py", 150, "forward")
USER_OPTIMIZER = ("/home/u/proj/cs336_basics/optimizers.py", 82, "step")
TO_DEVICE = ("/home/u/proj/train.py", 90, "train")
PARAM_BLOCKS, PARAM_SIZE = 4, 1_700 * MiB
ACT_BLOCKS, ACT_SIZE = 6, GiB
ALLOCATOR_SETTINGS = {  # the keys torch 2.x writes (torch/csrc/cuda/memory_snapshot.cpp)
    "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
    "expandable_segments": False, "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
    "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0}}


def real_shaped_run(stacks: str = "all", steps: int = 2, annotate: bool = False,
                    segment_size: int = 40 * (1 << 30)) -> AllocatorReplay:
    """A training run recorded with `_record_memory_history(stacks=stacks)` from its start:
    `model.to("cuda")` (4 parameters of 1,700 MiB), then steps of a forward (6 activations of
    1 GiB), a backward whose gradients the autograd engine's thread allocates (C++ frames only;
    with `stacks="python"` no frames) while it frees the activations, an optimizer step that
    makes its state lazily in the first step (two `zeros_like` per parameter, in the user's own
    optimizer under torch's `Optimizer` wrapper), and `zero_grad(set_to_none=True)`, whose
    frees carry its own stack. `annotate`: each step inside `ProfilerStep#N` annotations (as
    with `global_record_annotations=True` under the profiler). The peak is in step 2's
    backward, at its last gradient: parameters, state, every gradient and the three
    activations not yet freed."""
    replay = AllocatorReplay(segment_size=segment_size)
    module = f"{SITE_PACKAGES}/torch/nn/modules/module.py"
    to_device = cuda_stack((module, 1355, "convert"), (module, 942, "_apply"),
                           (module, 1369, "to"), TO_DEVICE, stacks=stacks)
    forward = cuda_stack(USER_FORWARD, (module, 1784, "_call_impl"),
                         (module, 1773, "_wrapped_call_impl"), USER_TRAIN, stacks=stacks)
    optimizer = cuda_stack(USER_OPTIMIZER, (f"{SITE_PACKAGES}/torch/optim/optimizer.py", 493,
                                            "wrapper"), USER_TRAIN, stacks=stacks)
    backward = autograd_thread_stack() if stacks == "all" else []
    zero_grad = cuda_stack((f"{SITE_PACKAGES}/torch/optim/optimizer.py", 980, "zero_grad"),
                           USER_TRAIN, stacks=stacks)
    params = [replay.alloc(PARAM_SIZE, to_device) for _ in range(PARAM_BLOCKS)]
    state: list[int] = []

    def step() -> None:
        acts = [replay.alloc(ACT_SIZE, forward) for _ in range(ACT_BLOCKS)]
        grads = []
        for i in range(PARAM_BLOCKS):
            grads.append(replay.alloc(PARAM_SIZE, backward))
            replay.free(acts[i])
        for addr in acts[PARAM_BLOCKS:]:
            replay.free(addr)
        if not state:
            state.extend(replay.alloc(PARAM_SIZE, optimizer) for _ in range(2 * len(params)))
        for addr in grads:
            replay.free(addr, zero_grad)

    for n in range(steps):
        if annotate:
            replay.step(n, step)
        else:
            step()
    return replay


def real_shaped_snapshot(stacks: str = "all", annotate: bool = False) -> dict[str, Any]:
    """`real_shaped_run` as `torch.cuda.memory._snapshot()` returns it: its allocator settings,
    and the `snapshot` entry the allocator adds to the history when a snapshot is taken."""
    replay = real_shaped_run(stacks, annotate=annotate)
    replay.builder.trace("snapshot", 0, 0, replay.time_us + 10, replay.device)
    snap = replay.snapshot()
    snap["allocator_settings"] = dict(ALLOCATOR_SETTINGS)
    return snap


def leaky_snapshot(trainprof_key: dict[str, Any], site: str = "/job/train.py",
                   history: bool = True) -> dict[str, Any]:
    """Six steps that each keep 3 MiB (``log_metrics``) beside 24 MiB of work freed again
    (``train_step``), frames from ``site``; ``trainprof_key``: the recorder's own key (rank,
    reason, step, memory breakdown...)."""
    replay = AllocatorReplay()
    keep = frames((site, 57, "log_metrics"))
    work = frames((site, 42, "train_step"))

    def step() -> None:
        acts = [replay.alloc(8 * MiB, work) for _ in range(3)]
        replay.alloc(3 * MiB, keep)
        for addr in acts:
            replay.free(addr)

    for n in range(6):
        replay.step(n, step)
    snap = replay.snapshot(history=history)
    snap["trainprof"] = trainprof_key
    return snap
