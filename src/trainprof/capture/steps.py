"""`trainprof.StepTimer`: per-step phases, throughput, peak memory and MFU, from hooks alone.

    timer = trainprof.StepTimer(model=model, optimizer=optimizer)
    for batch in timer.wrap(loader):
        ...                     # the training step, unchanged
    print(timer.summary())

A step runs from one fetch of the wrapped loader to the next. Inside it, data is the fetch,
forward is the model's forward call (root-module hooks), backward is the `backward()` call
(`torch.autograd.backward`, see `capture.backward`), optimizer is `optimizer.step()` (step
hooks); other is the rest (moving the batch, the loss, zero_grad, logging). Without `wrap()`, a
step ends at each `optimizer.step()` (the next begins there) and the data phase is unknown: the
loader's time counts as other.

Every hook runs in the training loop, so each reads the clock and stores the mark, and nothing
else: a step in flight is one list, built in one instruction, that the hooks append
(phase, start, end) marks to; the arithmetic happens every `READBACK_EVERY` steps. The one-off
FLOP count runs outside every step, on a meta-device copy of the model (`capture.flop_count`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import torch

from trainprof.capture import backward as backward_calls
from trainprof.capture.batches import batch_size_of, tokens_of
from trainprof.capture.clocks import clock_for
from trainprof.capture.device import model_device, peak_flops_for, peak_memory_bytes
from trainprof.capture.flop_count import meta_flops, meta_inputs
from trainprof.capture.jsonl_sink import JsonlSink
from trainprof.capture.memory_breakdown import MemoryProbe
from trainprof.capture.safety import WarnOnce
from trainprof.capture.step_times import PHASES, StepTimes, Window, log_line, per_second, phases_ms

__all__ = ["PHASES", "StepTimer"]

T = TypeVar("T")
logger = logging.getLogger("trainprof.steps")

_DATA, _FORWARD, _BACKWARD, _OPTIMIZER, _OTHER = range(len(PHASES))
#: Finished steps are turned into numbers in batches of this many: on a GPU so that reading the
#: CUDA events back never waits (the GPU is at most a few steps behind), on a CPU to keep the
#: work inside each step to a few appends.
READBACK_EVERY = 32


#: A step in flight is a list (one instruction to build, no __init__ to call): these fields, then
#: one (phase, start, end) tuple per timed call. Marks are seconds on a CPU, CUDA events on a GPU
#: (`clocks.CudaClock.resolve` turns them into seconds at read-back).
INDEX, START, DATA_END, END, SAMPLES, TOKENS, EXCLUDED, INTERVALS = range(8)


class TimerView(msgspec.Struct, frozen=True):
    """What a step timer measured over its latest steps (``StepTimer.recent``)."""

    last_step: int  # the index of the last step the timer has seen
    measured: int  # steps in the statistics so far
    window: Window  # the latest steps' totals (phases, samples, tokens)
    step_ms: tuple[float, ...]  # their step times, oldest first
    spark_ms: tuple[float, ...]  # a longer tail of step times, for a sparkline
    mfu: float | None
    optimizer: str | None  # the optimizer's class name, once it has stepped
    optimizer_implementation: str | None  # "for-loop", "foreach", "fused" (None: torch's choice)
    optimizer_tensors: int  # parameter tensors it updates


def optimizer_facts(optimizer: Any) -> tuple[str, str | None, int]:
    """(class name, implementation, parameter tensors) of a torch optimizer, as far as its
    settings say: ``fused=True`` or ``foreach=True/False``; None when torch picks."""
    defaults = getattr(optimizer, "defaults", {}) or {}
    implementation = ("fused" if defaults.get("fused") else "foreach"
                      if defaults.get("foreach") else "for-loop"
                      if defaults.get("foreach") is False else None)
    tensors = sum(len(g.get("params", ())) for g in getattr(optimizer, "param_groups", ()))
    return type(optimizer).__name__, implementation, tensors


class StepTimer:
    """Times each training step by phase and reports throughput, peak memory and MFU.

    `batch_size` overrides the size read from each batch; `seq_dim` (e.g. 1 for (batch, seq)
    tokens) turns on tokens/s. `flops_per_step` gives the model's FLOPs per step; without it,
    `count_flops=True` (the default) counts them once, outside the training steps: the first
    batch's shapes go through a meta-device copy of the model when a figure first needs them
    (docs/capture.md). `peak_flops` overrides the GPU table. The first `warmup_steps` steps are
    left out of the statistics. Every `log_every` steps a line goes to the "trainprof.steps"
    logger at INFO, or to stderr when logging would not show it; `jsonl_path` gets one JSON line
    per step. A failure inside the timer warns once and turns the timer off; training goes on.
    `live=True` shows a live panel on rank 0 (docs/live.md); `trainprof.StepTimer` adds
    `history=True` (or a run name): the summary goes to the run history at `close()`
    (trainprof/step_timer.py, docs/history.md). `log_to` ("mlflow",
    "wandb", "tensorboard", a run, an Accelerator or a Trainer, or a list of them) sends each
    step's times from a background thread and the summary at `close()` (docs/trackers.md).
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        batch_size: int | None = None,
        seq_dim: int | None = None,
        flops_per_step: float | None = None,
        count_flops: bool = True,
        peak_flops: float | None = None,
        log_every: int | None = 100,
        jsonl_path: str | Path | None = None,
        warmup_steps: int = 1,
        live: bool = False,
        log_to: Any = None,
    ) -> None:
        self.device = model_device(model)
        self.batch_size = batch_size
        self.seq_dim = seq_dim
        self._flops_per_step = flops_per_step
        self.peak_flops = peak_flops if peak_flops is not None else peak_flops_for(self.device)
        self.log_every = log_every
        self.warmup_steps = warmup_steps
        self._clock = clock_for(self.device)
        self._now = self._clock.now
        self._stats = StepTimes()
        self._excluded = 0
        self._warn = WarnOnce()
        self._broken = False
        self._wrapped = False
        self._current: list | None = None  # the step in flight (fields above)
        self._next_index = 0
        self._pending: list[list] = []
        self._forward_start: Any = None
        self._backward_start: Any = None
        self._backward_depth = 0
        self._optimizer_start: Any = None
        self._optimizer_depth = 0
        self._optimizer_facts: tuple[str, str | None, int] | None = None
        self._last_end: Any = None  # without wrap(), where the next step begins
        self._flop_inputs: tuple[tuple, dict] | None = None  # the first forward's, as meta tensors
        self._saw_backward = False  # the FLOP count includes a backward only if training has one
        self._flop_step: int | None = None  # the step the count ran in, if any: left out
        self._jsonl = JsonlSink(jsonl_path, self._warn) if jsonl_path else None
        self._handles: list[Any] = []
        self._model = model
        self._memory = MemoryProbe(self.device, self._warn)  # docs/memory_breakdown.md
        self._attach(model, optimizer)
        self._flop_hook: Any = None
        if count_flops and flops_per_step is None and model is not None:
            self._flop_hook = model.register_forward_pre_hook(self._keep_flop_inputs, with_kwargs=True)
            self._handles.append(self._flop_hook)
        self._trackers = _step_logger(log_to)
        self._live = None
        if live:
            from trainprof.capture.live import live_view

            self._live = live_view(self)

    # -- public -----------------------------------------------------------------------------

    @property
    def flops_per_step(self) -> float | None:
        """The model's FLOPs per step: given, or counted once (on a meta-device copy, at the
        first read after the first forward); None when unknown."""
        if self._flop_inputs is not None:
            self._count_flops()
        return self._flops_per_step

    @flops_per_step.setter
    def flops_per_step(self, value: float | None) -> None:
        self._drop_flop_hook()
        self._flop_inputs = None
        self._flops_per_step = value

    def to_run_record(self) -> dict[str, Any]:
        """This timer as a plain record (summary, every step's time, rank, device): the run
        history takes it without knowing the step timer (capture/run_record.py)."""
        from trainprof.capture.run_record import timer_record

        return timer_record(self)

    def recent(self, steps: int = 50, spark_steps: int = 60) -> TimerView | None:
        """A read-only view of the latest ``steps`` measured steps (the live view, the trackers
        and the verdicts read this, never the timer's fields); None before the first one."""
        stats = self._stats
        if not stats.steps:
            return None
        start = max(0, stats.steps - steps)
        window = stats.window(start)
        name, implementation, tensors = self._optimizer_facts or (None, None, 0)
        return TimerView(
            last_step=self._next_index - 1, measured=stats.steps, window=window,
            step_ms=tuple(s * 1e3 for s in stats.column(0, start)),
            spark_ms=tuple(s * 1e3 for s in stats.column(0, max(0, stats.steps - spark_steps))),
            mfu=self._mfu(window), optimizer=name, optimizer_implementation=implementation,
            optimizer_tensors=tensors)

    def wrap(self, loader: Iterable[T]) -> Iterator[T]:
        """Yields the loader's batches, timing each fetch and delimiting steps."""
        self._wrapped = True
        now = self._now
        tensor = torch.Tensor
        iterator = iter(loader)
        pending = self._pending
        try:
            while True:
                # Inlined _close_step and _open_step: this runs once per step, with cold caches.
                start = now()
                step = self._current
                if step is not None:
                    self._current = None
                    step[END] = start
                    pending.append(step)
                    if len(pending) >= READBACK_EVERY:
                        self._read_back(wait=False)
                        pending = self._pending
                    if self._live is not None:
                        self._live.tick()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                if self._broken:
                    yield batch
                    continue
                data_end = now()
                samples = self.batch_size
                if samples is None:  # the first tensor's first dimension, as batch_size_of says
                    first = batch[0] if type(batch) in (tuple, list) and batch else batch  # type: ignore[index]
                    if type(first) is tensor:
                        shape = first.shape
                        samples = shape[0] if shape else None
                    else:
                        samples = batch_size_of(batch)
                index = self._next_index
                self._next_index = index + 1
                tokens = None if self.seq_dim is None else tokens_of(batch, samples, self.seq_dim)
                self._optimizer_depth = 0
                self._current = [index, start, data_end, None, samples, tokens, index < self.warmup_steps]
                yield batch
        finally:
            self._current = None  # a step cut short by `break` or an exception is not counted

    def step_times_ms(self) -> list[float]:
        """Every measured step's time in ms, oldest first (warm-up and FLOP-count steps left out)."""
        self._read_back(wait=True)
        return [seconds * 1e3 for seconds in self._stats.column(0)]

    def fetch(self, get: Callable[[], T]) -> T:
        """Returns `get()`, the next batch, timed as the data phase of the step it begins: for
        loaders outside `wrap()` (`trainprof run --live` times every DataLoader this way)."""
        start = self._now()
        batch = get()
        if self._wrapped or self._broken:
            return batch
        try:
            if self._current is None:
                self._open_step(self._last_end if self._last_end is not None else start, None, None)
            step = self._current
            assert step is not None  # _open_step just opened it
            step.append((_DATA, start, self._now()))
            if self.batch_size is None:  # else _open_step counted batch_size per step
                size = batch_size_of(batch)
                step[SAMPLES] = None if size is None else (step[SAMPLES] or 0) + size
        except Exception as error:
            self._fail(error)
        return batch

    def summary(self) -> dict[str, Any]:
        """Everything measured so far, as a plain JSON-serialisable dict."""
        self._read_back(wait=True)
        everything = self._stats.window()
        return {
            "steps": everything.steps,
            "excluded_steps": self._excluded,
            "device": str(self.device),
            "step_ms": self._stats.distribution(),
            "phases_ms": phases_ms(everything),
            "samples_per_s": per_second(everything.samples, everything),
            "tokens_per_s": per_second(everything.tokens, everything),
            "peak_memory_bytes": peak_memory_bytes(self.device),
            "flops_per_step": self.flops_per_step,
            "peak_flops": self.peak_flops,
            "mfu": self._mfu(everything),
            "memory_breakdown": self._memory.breakdown(),
        }

    def close(self) -> None:
        """Removes the hooks, closes the JSONL file, ends the live view and sends the summary to
        the trackers; `summary()` still works afterwards."""
        self._read_back(wait=True)
        if self._live is not None:
            self._live.stop()
            self._live = None
        self._detach()
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._trackers is not None:
            from trainprof.trackers.metrics import timer_summary_metrics

            trackers, self._trackers = self._trackers, None
            summary = self.summary()
            trackers.close(timer_summary_metrics(summary), summary)

    def __enter__(self) -> StepTimer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- hooks: each is a few appends, and never raises into the training loop ---------------

    def _attach(self, model: Any, optimizer: Any) -> None:
        if model is not None:
            self._handles.append(model.register_forward_pre_hook(self._on_forward_start))
            self._handles.append(model.register_forward_hook(self._on_forward_end))
        # accelerate's AcceleratedOptimizer wraps the real one, whose step() is what runs.
        optimizer = getattr(optimizer, "optimizer", optimizer)
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._on_optimizer_start))
            self._handles.append(optimizer.register_step_post_hook(self._on_optimizer_end))
        else:  # time whichever optimizer runs
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )

            self._handles.append(register_optimizer_step_pre_hook(self._on_optimizer_start))
            self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_end))
        backward_calls.add_listener(self)

    def _detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        backward_calls.remove_listener(self)

    def _fail(self, error: Exception) -> None:
        self._broken = True
        self._current = None
        self._detach()
        self._warn("the step timer failed and stopped timing; training goes on", error)

    def _on_forward_start(self, module: Any, args: Any) -> None:
        try:
            # Activation checkpointing runs forward again inside backward: that is backward.
            if self._backward_depth or (self._current is None and not self._open_for_hook()):
                return
            self._forward_start = self._now()
        except Exception as error:
            self._fail(error)

    def _on_forward_end(self, module: Any, args: Any, output: Any) -> None:
        try:
            start, step = self._forward_start, self._current
            if start is not None and step is not None:
                step.append((_FORWARD, start, self._now()))
                self._forward_start = None
        except Exception as error:
            self._fail(error)

    def on_backward_start(self) -> None:
        """Called by `capture.backward` as `torch.autograd.backward` begins."""
        try:
            self._backward_depth += 1
            if self._backward_depth == 1 and (self._current is not None or self._open_for_hook()):
                self._backward_start = self._now()
        except Exception as error:
            self._fail(error)

    def on_backward_end(self) -> None:
        """Called as `torch.autograd.backward` returns: every gradient is ready."""
        try:
            depth = self._backward_depth - 1
            self._backward_depth = depth if depth > 0 else 0
            start = self._backward_start
            if depth > 0 or start is None:
                return
            step = self._current
            if step is not None:
                step.append((_BACKWARD, start, self._now()))
            self._backward_start = None
            self._saw_backward = True
        except Exception as error:
            self._fail(error)

    def _on_optimizer_start(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            # A subclass whose step() calls super().step() runs the hooks twice, nested.
            self._optimizer_depth += 1
            if self._optimizer_depth > 1:
                return
            if self._current is not None or self._open_for_hook():
                self._optimizer_start = self._now()
        except Exception as error:
            self._fail(error)

    def _on_optimizer_end(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            depth = self._optimizer_depth - 1
            self._optimizer_depth = depth if depth > 0 else 0
            start, step = self._optimizer_start, self._current
            if depth > 0 or start is None or step is None:
                return
            end = self._now()
            step.append((_OPTIMIZER, start, end))
            self._optimizer_start = None
            if self._optimizer_facts is None:  # once: every gradient and state tensor exists now
                self._memory.capture_once(self._model, optimizer)
                self._optimizer_facts = optimizer_facts(optimizer)
            if not self._wrapped:
                self._close_step(end)
                self._last_end = end
        except Exception as error:
            self._fail(error)

    # -- steps ------------------------------------------------------------------------------

    def _open_for_hook(self) -> bool:
        """Without `wrap()`, the first hook of a step opens it, back-dated to where the last step
        ended so that steps tile the run; with `wrap()`, only the loader opens steps."""
        if self._wrapped or self._broken:
            return False
        start = self._last_end if self._last_end is not None else self._now()
        self._open_step(start, None, None)
        return True

    def _open_step(self, start: Any, data_end: Any, batch: Any) -> None:
        samples = self.batch_size if self.batch_size is not None else batch_size_of(batch)
        tokens = None if self.seq_dim is None else tokens_of(batch, samples, self.seq_dim)
        index = self._next_index
        self._next_index = index + 1
        self._optimizer_depth = 0  # in case an optimizer step raised half-way
        self._current = [index, start, data_end, None, samples, tokens, index < self.warmup_steps]

    def _close_step(self, end: Any) -> None:
        step, self._current = self._current, None
        if step is None:
            return
        step[END] = end
        self._pending.append(step)
        if len(self._pending) >= READBACK_EVERY:
            self._read_back(wait=False)
        if self._live is not None:
            self._live.tick()

    def _read_back(self, wait: bool) -> None:
        """Turns finished steps into numbers, oldest first; with `wait`, all of them."""
        try:
            pending = self._pending
            if not pending:
                return
            clock = self._clock
            if not clock.immediate:
                if wait:
                    clock.wait(pending[-1][END])
                done = 0
                for step in pending:
                    if not clock.ready(step[END]):
                        break
                    clock.resolve(step)  # CUDA events to seconds
                    done += 1
                finished = pending[:done]
                del pending[:done]
            else:
                finished = pending[:]
                del pending[:]  # in place: wrap() holds this list
            for step in finished:
                self._record(step)
        except Exception as error:
            self._pending = []
            self._fail(error)

    def _record(self, step: list) -> None:
        start = step[START]
        data_end = step[DATA_END]
        phases = [0.0 if data_end is None else data_end - start, 0.0, 0.0, 0.0, 0.0]
        for phase, begin, end in step[INTERVALS:]:
            phases[phase] += end - begin
        step_s = step[END] - start
        phases[_OTHER] = max(0.0, step_s - sum(phases))
        if step[INDEX] == self._flop_step:
            step[EXCLUDED] = True
        if self._jsonl is not None or self._trackers is not None:
            self._send_record(step, step_s, phases)
        if step[EXCLUDED]:
            self._excluded += 1
            return
        self._stats.add(step_s, phases, step[SAMPLES], step[TOKENS])
        if self.log_every and self._stats.steps_since_log >= self.log_every:
            window = self._stats.take_recent()
            self._log(log_line(step[INDEX], window, self._mfu(window)))

    # -- FLOPs, output ----------------------------------------------------------------------

    def _keep_flop_inputs(self, module: Any, args: Any, kwargs: Any) -> None:
        """Once, at the first forward inside a step (not a recompute inside backward): the
        inputs' shapes, dtypes and `requires_grad` as meta tensors, for the FLOP count."""
        if self._backward_depth or self._current is None:
            return
        try:
            self._drop_flop_hook()
            self._flop_inputs = meta_inputs(args, kwargs)
        except Exception as error:
            self._warn("could not keep the first batch's shapes to count FLOPs; MFU is unknown", error)

    def _drop_flop_hook(self) -> None:
        hook, self._flop_hook = self._flop_hook, None
        if hook is not None:
            hook.remove()
            if hook in self._handles:
                self._handles.remove(hook)

    def _count_flops(self) -> None:
        """FLOPs of one forward (and backward, if training has one) on the first batch's shapes,
        on a meta-device copy of the model: no data, no arithmetic, outside every step."""
        inputs, self._flop_inputs = self._flop_inputs, None
        if inputs is None or self._model is None:
            return
        # Asked for in the middle of training (a log line, the live view): the step that is
        # open, or opens next, pays for it and is left out of the statistics.
        self._flop_step = self._next_index if self._current is None else self._current[INDEX]
        try:
            self._flops_per_step = meta_flops(self._model, inputs, self._saw_backward, self) or None
        except Exception as error:
            self._warn("could not count FLOPs per step on a meta-device copy of the model; MFU is "
                       "unknown (pass flops_per_step=)", error)

    def _mfu(self, window: Window) -> float | None:
        """Achieved FLOP/s over the device's peak: flops_per_step * steps / seconds / peak."""
        seconds = window.total_ms / 1e3
        if not (self.peak_flops and window.steps and seconds > 0 and self.flops_per_step):
            return None
        return self.flops_per_step * window.steps / seconds / self.peak_flops

    def _send_record(self, step: list, step_s: float, phases: list[float]) -> None:
        """The step's record to the JSONL file and the trackers (docs/trackers.md)."""
        index = step[INDEX]
        record: dict[str, Any] = {"step": index, "step_ms": round(step_s * 1e3, 4)}
        record.update({f"{p}_ms": round(v * 1e3, 4) for p, v in zip(PHASES, phases, strict=True)})
        record.update(samples=step[SAMPLES], tokens=step[TOKENS], excluded=step[EXCLUDED])
        if self._jsonl is not None:
            self._jsonl.write(record)
        if self._trackers is not None:
            self._trackers.step(index, record)

    def _log(self, line: str) -> None:
        if self._jsonl is not None:
            self._jsonl.flush()
        if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            logger.info(line)
        else:  # logging left at its defaults would drop the line, which the user asked for
            print(line, file=sys.stderr)


def _step_logger(log_to: Any) -> Any:
    """A background logger for ``log_to`` (docs/trackers.md), or None; a tracker that cannot
    start warns and is left out, a missing package raises (before training starts)."""
    if log_to is None:
        return None
    from trainprof.trackers.background import StepLogger
    from trainprof.trackers.resolve import open_trackers

    trackers = open_trackers(log_to)
    return StepLogger(trackers) if trackers else None
