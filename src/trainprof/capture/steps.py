"""`trainprof.StepTimer`: per-step phases, throughput, peak memory and MFU, from hooks alone.

    timer = trainprof.StepTimer(model=model, optimizer=optimizer)
    for batch in timer.wrap(loader):
        ...                     # the training step, unchanged
    print(timer.summary())

A step runs from one fetch of the wrapped loader to the next. Inside it, the data phase is the
fetch, forward is the model's forward call (root-module hooks), backward runs from the first
gradient reaching the model's output to the end of the autograd pass, optimizer is
`optimizer.step()`; other is the rest (moving the batch, the loss, zero_grad, logging). Without
`wrap()`, a step ends at each `optimizer.step()` and the data phase is unknown (zero).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch.utils.flop_counter import FlopCounterMode

from trainprof.capture.batches import batch_size_of, tensors_in, tokens_of
from trainprof.capture.clocks import clock_for
from trainprof.capture.device import model_device, peak_flops_for, peak_memory_bytes
from trainprof.capture.safety import WarnOnce
from trainprof.capture.step_stats import PHASES, StepStats, log_line

__all__ = ["PHASES", "StepTimer"]

T = TypeVar("T")
logger = logging.getLogger("trainprof.steps")

_DATA, _FORWARD, _BACKWARD, _OPTIMIZER, _OTHER = range(len(PHASES))
#: Finished steps are turned into numbers in batches of this many: on a GPU so that reading the
#: CUDA events back never waits (the GPU is at most a few steps behind), on a CPU to keep the
#: cost inside each step to a few appends.
READBACK_EVERY = 32


class _Step:
    """One step's marks (ints on a CPU, CUDA events on a GPU); turned into ms at read-back."""

    __slots__ = ("index", "start", "data_end", "end", "intervals", "samples", "tokens", "excluded")

    def __init__(self, index: int, start: Any, data_end: Any, samples: int | None) -> None:
        self.index = index
        self.start = start
        self.data_end = data_end
        self.end: Any = None
        self.intervals: list[tuple[int, Any, Any]] = []
        self.samples = samples
        self.tokens: int | None = None
        self.excluded = False


def _never_raises(hook: Callable[..., Any]) -> Callable[..., Any]:
    """A timing hook that fails warns once and switches the timer off, instead of raising."""

    @functools.wraps(hook)
    def guarded(self: StepTimer, *args: Any, **kwargs: Any) -> Any:
        if self._broken:
            return None
        try:
            return hook(self, *args, **kwargs)
        except Exception as error:
            self._broken = True
            self._warn("the step timer failed and stopped timing; training goes on", error)
            return None

    return guarded


class StepTimer:
    """Times each training step by phase and reports throughput, peak memory and MFU.

    `batch_size` overrides the size read from each batch; `seq_dim` (e.g. 1 for (batch, seq)
    tokens) turns on tokens/s. `flops_per_step` skips the one-step FLOP count; `peak_flops`
    overrides the GPU table. The first `warmup_steps` steps, and the step whose FLOPs are counted,
    are left out of the statistics. Every `log_every` steps a line is logged (printed to stderr
    when logging is not configured); `jsonl_path` gets one JSON line per step.
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        batch_size: int | None = None,
        seq_dim: int | None = None,
        flops_per_step: float | None = None,
        peak_flops: float | None = None,
        log_every: int | None = 100,
        jsonl_path: str | Path | None = None,
        warmup_steps: int = 1,
    ) -> None:
        self.device = model_device(model)
        self.batch_size = batch_size
        self.seq_dim = seq_dim
        self.flops_per_step = flops_per_step
        self.peak_flops = peak_flops if peak_flops is not None else peak_flops_for(self.device)
        self.log_every = log_every
        self.warmup_steps = warmup_steps
        self._clock = clock_for(self.device)
        self._stats = StepStats()
        self._excluded = 0
        self._warn = WarnOnce()
        self._broken = False
        self._wrapped = False
        self._current: _Step | None = None
        self._next_index = 0
        self._pending: list[_Step] = []
        self._in_backward = False
        self._forward_start: Any = None
        self._backward_start: Any = None
        self._optimizer_start: Any = None
        self._flop_counter: FlopCounterMode | None = None
        self._count_flops = flops_per_step is None and model is not None
        self._jsonl = open(jsonl_path, "a", encoding="utf-8") if jsonl_path else None  # noqa: SIM115
        self._handles = self._register(model, optimizer)

    # -- public -----------------------------------------------------------------------------

    def wrap(self, loader: Iterable[T]) -> Iterator[T]:
        """Yields the loader's batches, timing each fetch and delimiting steps."""
        self._wrapped = True
        now = self._clock.now
        iterator = iter(loader)
        try:
            while True:
                start = now()
                self._close_step(start)
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                self._open_step(start, now(), batch)
                yield batch
        finally:
            self._current = None  # a step cut short by `break` or an exception is not counted

    def summary(self) -> dict[str, Any]:
        """Everything measured so far, as a plain JSON-serialisable dict."""
        self._stop_flop_count()
        self._read_back(wait=True)
        stats = self._stats
        return {
            "steps": len(stats.step_ms),
            "excluded_steps": self._excluded,
            "device": str(self.device),
            "step_ms": stats.distribution(),
            "phases_ms": stats.phases_ms(),
            "samples_per_s": stats.per_second(stats.samples),
            "tokens_per_s": stats.per_second(stats.tokens),
            "peak_memory_bytes": peak_memory_bytes(self.device),
            "flops_per_step": self.flops_per_step,
            "peak_flops": self.peak_flops,
            "mfu": self._mfu(stats.all.steps, stats.seconds),
        }

    def close(self) -> None:
        """Removes the hooks and closes the JSONL file; `summary()` still works afterwards."""
        self._stop_flop_count()
        self._read_back(wait=True)
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None

    def __enter__(self) -> StepTimer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- hooks ------------------------------------------------------------------------------

    def _register(self, model: Any, optimizer: Any) -> list[Any]:
        handles = []
        if model is not None:
            handles.append(model.register_forward_pre_hook(self._on_forward_start))
            handles.append(model.register_forward_hook(self._on_forward_end))
        # accelerate's AcceleratedOptimizer wraps the real one, whose step() is what runs.
        optimizer = getattr(optimizer, "optimizer", optimizer)
        if optimizer is not None:
            handles.append(optimizer.register_step_pre_hook(self._on_optimizer_start))
            handles.append(optimizer.register_step_post_hook(self._on_optimizer_end))
        else:  # time whichever optimizer runs
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            handles.append(register_optimizer_step_pre_hook(self._on_optimizer_start))
            handles.append(register_optimizer_step_post_hook(self._on_optimizer_end))
        return handles

    @_never_raises
    def _on_forward_start(self, module: Any, args: Any) -> None:
        if self._in_backward:  # activation checkpointing re-runs forward inside backward
            return
        step = self._step_for_hook()
        if step is None:
            return
        if self._count_flops:
            self._count_flops = False
            step.excluded = True  # counting slows this step down
            self._flop_counter = FlopCounterMode(display=False)
            self._flop_counter.__enter__()
        self._forward_start = self._clock.now()

    @_never_raises
    def _on_forward_end(self, module: Any, args: Any, output: Any) -> None:
        step = self._current
        if step is None or self._forward_start is None or self._in_backward:
            return
        step.intervals.append((_FORWARD, self._forward_start, self._clock.now()))
        self._forward_start = None
        if torch.is_grad_enabled():
            # One hook suffices: the first gradient to reach any output starts the backward.
            for tensor in tensors_in(output):
                if tensor.requires_grad:
                    node = tensor.grad_fn
                    if node is not None:  # a C++ pre-hook costs less than Tensor.register_hook
                        node.register_prehook(self._on_output_grad)
                    else:
                        tensor.register_hook(self._on_output_grad)
                    break

    @_never_raises
    def _on_output_grad(self, grad: Any) -> None:
        if self._in_backward or self._current is None:
            return
        self._in_backward = True
        self._backward_start = self._clock.now()
        # Runs when the whole autograd pass has finished, parameters' gradients included.
        torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    @_never_raises
    def _on_backward_end(self) -> None:
        self._in_backward = False
        if self._current is not None:
            self._current.intervals.append((_BACKWARD, self._backward_start, self._clock.now()))

    @_never_raises
    def _on_optimizer_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._flop_counter is not None:
            self._stop_flop_count()
        if self._step_for_hook() is not None:
            self._optimizer_start = self._clock.now()

    @_never_raises
    def _on_optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        step = self._current
        if step is None or self._optimizer_start is None:
            return
        end = self._clock.now()
        step.intervals.append((_OPTIMIZER, self._optimizer_start, end))
        self._optimizer_start = None
        if not self._wrapped:
            self._close_step(end)

    # -- steps ------------------------------------------------------------------------------

    def _step_for_hook(self) -> _Step | None:
        """The open step; without `wrap()`, the first hook of a step opens it."""
        if self._current is None and not self._wrapped and not self._broken:
            self._open_step(self._clock.now(), None, None)
        return self._current

    def _open_step(self, start: Any, data_end: Any, batch: Any) -> None:
        samples = self.batch_size if self.batch_size is not None else batch_size_of(batch)
        step = _Step(self._next_index, start, data_end, samples)
        self._next_index += 1
        step.excluded = step.index < self.warmup_steps
        if self.seq_dim is not None:
            step.tokens = tokens_of(batch, samples, self.seq_dim)
        self._in_backward = False
        self._current = step

    def _close_step(self, end: Any) -> None:
        step, self._current = self._current, None
        if self._flop_counter is not None:
            self._stop_flop_count()
        if step is None or self._broken:
            return
        step.end = end
        self._pending.append(step)
        if len(self._pending) >= READBACK_EVERY:
            self._read_back(wait=False)

    @_never_raises
    def _read_back(self, wait: bool) -> None:
        """Turns finished steps into numbers, oldest first; with `wait`, all of them."""
        pending = self._pending
        if wait and pending:
            self._clock.wait(pending[-1].end)
        done = 0
        for step in pending:
            if not self._clock.ready(step.end):
                break
            self._record(step)
            done += 1
        del pending[:done]

    def _record(self, step: _Step) -> None:
        elapsed = self._clock.elapsed_ms
        phases = [0.0] * len(PHASES)
        if step.data_end is not None:
            phases[_DATA] = elapsed(step.start, step.data_end)
        for phase, start, end in step.intervals:
            phases[phase] += elapsed(start, end)
        step_ms = elapsed(step.start, step.end)
        phases[_OTHER] = max(0.0, step_ms - sum(phases))
        self._clock.release(step)
        if self._jsonl is not None:
            self._write_jsonl(step, step_ms, phases)
        if step.excluded:
            self._excluded += 1
            return
        self._stats.add(step_ms, phases, step.samples, step.tokens)
        if self.log_every and self._stats.steps_since_log >= self.log_every:
            window = self._stats.take_recent()
            self._log(log_line(step.index, window, self._mfu(window.steps, window.total_ms / 1e3)))

    # -- output -----------------------------------------------------------------------------

    def _write_jsonl(self, step: _Step, step_ms: float, phases: list[float]) -> None:
        record: dict[str, Any] = {"step": step.index, "step_ms": round(step_ms, 4)}
        record.update({f"{p}_ms": round(v, 4) for p, v in zip(PHASES, phases)})
        record.update(samples=step.samples, tokens=step.tokens, excluded=step.excluded)
        self._jsonl.write(json.dumps(record) + "\n")  # type: ignore[union-attr]

    def _log(self, line: str) -> None:
        if self._jsonl is not None:
            self._jsonl.flush()
        if logger.hasHandlers():
            logger.info(line)
        else:  # an unconfigured root logger would drop INFO lines
            print(line, file=sys.stderr)

    def _stop_flop_count(self) -> None:
        """Ends the one-step FLOP count; outside the autograd pass, whose exit would undo it."""
        counter, self._flop_counter = self._flop_counter, None
        if counter is None:
            return
        try:
            counter.__exit__(None, None, None)
            self.flops_per_step = float(counter.get_total_flops()) or None
        except Exception as error:
            self._warn("could not count FLOPs per step; MFU is unknown", error)

    def _mfu(self, steps: int, seconds: float) -> float | None:
        """Achieved FLOP/s over the device's peak: flops_per_step * steps / seconds / peak."""
        if not (self.flops_per_step and self.peak_flops and steps and seconds > 0):
            return None
        return self.flops_per_step * steps / seconds / self.peak_flops
