"""Where a training job's bytes go: parameters, gradients and optimizer state (by dtype and
device), read from the model and optimizer objects, and activations as the rest of the peak.

    probe = MemoryProbe(device, warn)         # when recording starts
    probe.capture_once(model, optimizer)      # right after an optimizer step
    probe.breakdown()                    # a plain dict (docs/memory_breakdown.md)

Bytes are counted per storage, once: tied weights, views and flat buffers are not counted twice.
The rest of the peak is what the peak holds beyond those three: on a GPU the caching
allocator's `max_memory_allocated` minus the persistent bytes on that device. On the CPU the
growth of the process's peak RSS since recording began, minus the gradients and optimizer state
(which appear after it began), is split in two: what the first step left resident (`runtime`:
torch's lazy start-up, the profiler's buffers, memory the C allocator keeps) and the rise of
the peak above that level (`activations`). See docs/memory_breakdown.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from trainprof.capture.device import peak_memory_bytes

CATEGORIES = ("parameters", "gradients", "optimizer_state")
#: How deep to look into an optimizer's per-parameter state for tensors (dicts, lists, tuples).
STATE_DEPTH = 3


def _storage_key_and_bytes(t: torch.Tensor) -> tuple[Any, int]:
    """(a key that names the tensor's memory, its bytes): the whole storage, counted once."""
    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        local = getattr(t, "_local_tensor", None)  # DTensor: the shard this rank holds
        if isinstance(local, torch.Tensor):
            t = local
    try:
        storage = t.untyped_storage()
        pointer = storage.data_ptr()
        if pointer:
            return (t.device, pointer), storage.nbytes()
    except Exception:  # wrapper subclasses without a storage: count the elements
        pass
    return ("tensor", id(t)), t.numel() * t.element_size()


def _tensors_in(value: Any, depth: int = STATE_DEPTH) -> Iterator[tuple[str, torch.Tensor]]:
    """(state key, tensor) for every tensor in an optimizer's per-parameter state."""
    if isinstance(value, torch.Tensor):
        yield "", value
    elif depth > 0 and isinstance(value, dict):
        for key, item in value.items():
            for inner, tensor in _tensors_in(item, depth - 1):
                yield inner or str(key), tensor
    elif depth > 0 and isinstance(value, list | tuple):
        for item in value:
            yield from _tensors_in(item, depth - 1)


def _unwrap(optimizer: Any) -> Any:
    """accelerate's AcceleratedOptimizer (and similar wrappers) hold the real one in `.optimizer`."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


def _parameters(model: Any, optimizer: Any) -> list[torch.Tensor]:
    params: dict[int, torch.Tensor] = {}
    if model is not None:
        params.update((id(p), p) for p in model.parameters())
    if optimizer is not None:
        for group in optimizer.param_groups:
            params.update((id(p), p) for p in group["params"])
    return list(params.values())


class Tally:
    """Bytes per (category, device, dtype), each storage counted once across categories."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, Any, Any], list[int]] = {}  # -> [bytes, tensors]
        self.state_keys: dict[str, int] = {}
        self.stateful_parameter_bytes = 0  # parameters that have optimizer state
        self._seen: set[Any] = set()

    def add(self, category: str, tensors: Iterable[torch.Tensor], state_key: str = "") -> None:
        for t in tensors:
            device = t.device
            if device.type == "meta":
                continue
            key, nbytes = _storage_key_and_bytes(t)
            if key in self._seen:
                continue
            self._seen.add(key)
            row = self._rows.setdefault((category, device, t.dtype), [0, 0])  # named at the end
            row[0] += nbytes
            row[1] += 1
            if state_key:
                self.state_keys[state_key] = self.state_keys.get(state_key, 0) + nbytes

    @property
    def rows(self) -> dict[tuple[str, str, str], list[int]]:
        """[bytes, storages] per (category, device, dtype name)."""
        named: dict[tuple[str, str, str], list[int]] = {}
        for (category, device, dtype), (nbytes, count) in self._rows.items():
            row = named.setdefault((category, str(device), str(dtype).removeprefix("torch.")), [0, 0])
            row[0] += nbytes
            row[1] += count
        return named

    def rows_dicts(self) -> list[dict[str, Any]]:
        """One dict per (category, device, dtype): bytes and how many storages."""
        return [{"category": c, "device": d, "dtype": t, "bytes": v[0], "tensors": v[1]}
                for (c, d, t), v in sorted(self.rows.items())]

    def total(self, category: str | None = None, device: str | None = None) -> int:
        return sum(v[0] for (c, d, _), v in self.rows.items()
                   if category in (None, c) and device in (None, d))


def tally(model: Any = None, optimizer: Any = None) -> Tally:
    """The persistent bytes of a model and its optimizer, as they are now."""
    optimizer = _unwrap(optimizer)
    counted = Tally()
    params = _parameters(model, optimizer)
    counted.add("parameters", params)
    counted.add("gradients", (p.grad for p in params if p.grad is not None))
    if optimizer is not None:
        for param, state in list(optimizer.state.items()):
            if isinstance(param, torch.Tensor) and param.device.type != "meta":
                counted.stateful_parameter_bytes += param.numel() * param.element_size()
            for key, tensor in _tensors_in(state):
                counted.add("optimizer_state", [tensor], key or "state")
    return counted


def breakdown_dict(counted: Tally, device: str, peak: int | None, rest: int | None,
                   notes: list[str], runtime: int | None = None) -> dict[str, Any]:
    """The breakdown as plain JSON values (docs/memory_breakdown.md)."""
    state = counted.total("optimizer_state")
    per_parameter = (state / counted.stateful_parameter_bytes
                     if counted.stateful_parameter_bytes else None)
    values = {c: counted.total(c) for c in CATEGORIES}
    # On the CPU the peak is the process's peak RSS: the part no other part explains is the
    # process itself (interpreter, libraries, data loaded before recording), so that the parts
    # add up to the peak instead of calling 99.9% of a 77 kB model's peak "activations".
    process = None
    if not device.startswith("cuda") and peak is not None and rest is not None:
        process = max(peak - sum(values.values()) - rest - (runtime or 0), 0)
    return {
        "device": device,
        "bytes": {**values, "activations": rest, "runtime": runtime, "process": process,
                  "peak": peak},
        "peak_source": "max_memory_allocated" if device.startswith("cuda") else "peak RSS",
        "rows": counted.rows_dicts(),
        "optimizer_state_keys": dict(sorted(counted.state_keys.items(), key=lambda kv: -kv[1])),
        "optimizer_state_per_parameter": per_parameter,
        "notes": notes,
    }


def current_rss() -> int | None:
    """The process's resident memory now (Linux /proc; psutil elsewhere; None without either)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.Process().memory_info().rss)


def resident_after_trim() -> int | None:
    """The process's resident memory once the C allocator has returned its free memory to the
    system (glibc's `malloc_trim(0)`), so that freed activations do not count as kept; the plain
    RSS where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return current_rss()


class MemoryProbe:
    """One job's memory: persistent bytes captured once after an optimizer step, and the peak."""

    def __init__(self, device: torch.device | None, warn: Callable[..., None]) -> None:
        """`device` None: the device of the first parameter, once captured."""
        self.device = device
        self.captured: Tally | None = None
        self._warn = warn
        self._failed = False
        self._start_rss = current_rss()  # for the CPU: the process before training grew it
        self._first_step_rss: int | None = None  # the CPU process right after the first step
        self._start_peak = peak_memory_bytes(torch.device("cpu"))

    def capture_once(self, model: Any, optimizer: Any) -> None:
        """Counts parameters, gradients and optimizer state, the first time it is called; call it
        right after `optimizer.step()`, when every gradient and state tensor exists. Never raises."""
        if self.captured is not None or self._failed:
            return
        try:
            self._first_step_rss = resident_after_trim()
            self.captured = tally(model, optimizer)
            if self.device is None:
                params = _parameters(model, _unwrap(optimizer))
                self.device = params[0].device if params else torch.device("cpu")
        except Exception as error:
            self._failed = True
            self._warn("could not count the model's and optimizer's memory; training goes on", error)

    def breakdown(self) -> dict[str, Any] | None:
        """The breakdown as a plain JSON-ready dict, or None before `capture_once`. Never raises."""
        if self.captured is None or self.device is None:
            return None
        try:
            peak, rest, notes = self._rest_of_peak(self.captured, self.device)
            runtime = None
            if rest is not None and self.device.type != "cuda":
                runtime = self._first_step_growth(self.captured, rest)
                rest -= runtime
            return breakdown_dict(self.captured, str(self.device), peak, rest, notes, runtime)
        except Exception as error:
            self._warn("could not read the peak memory for the memory breakdown", error)
            return None

    def _rest_of_peak(self, counted: Tally, device: torch.device
                      ) -> tuple[int | None, int | None, list[str]]:
        peak = peak_memory_bytes(device)
        if device.type == "cuda":
            if peak is None:
                return None, None, []
            return peak, max(peak - counted.total(device=str(device)), 0), []
        if peak is None or self._start_rss is None:
            return peak, None, ["the process's peak memory is unknown here, so the rest is too"]
        if self._start_peak is not None and peak <= self._start_peak:
            return peak, None, [
                "the process's peak RSS was reached before recording began (loading data or a "
                "model?), so the training step's own peak, and the activations, are unknown"]
        created = counted.total("gradients", "cpu") + counted.total("optimizer_state", "cpu")
        return peak, max(peak - self._start_rss - created, 0), [
            "CPU: the growth of the process's peak RSS since recording began, less the gradients "
            "and optimizer state, is what the first optimizer step left resident once freed "
            "memory went back to the system (torch's lazy start-up, the profiler's buffers) and "
            "the peak's rise above that level (activations and temporaries; under the profiler "
            "also its buffers filling and the trace being written)"]

    def _first_step_growth(self, counted: Tally, rest: int) -> int:
        """What the first step left resident beyond gradients and optimizer state (CPU): the
        part of the rest of the peak that is not the steps' own rise above it."""
        if self._first_step_rss is None or self._start_rss is None:
            return 0
        created = counted.total("gradients", "cpu") + counted.total("optimizer_state", "cpu")
        return min(max(self._first_step_rss - self._start_rss - created, 0), rest)
