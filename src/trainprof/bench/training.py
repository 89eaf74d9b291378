"""One strategy, measured: a fresh model and optimizer, warm-up steps, then timed repeats.

The steps are timed by `trainprof.StepTimer` (one place for step timing): CUDA events on a GPU,
read back without a synchronisation inside the loop, so the CPU runs ahead as in real training;
the timer waits for the last event before the numbers are read.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import torch

from trainprof.bench.batches import batch_stream
from trainprof.bench.memory import reset_peak_memory
from trainprof.bench.prepare import (
    NotApplicable,
    build_model,
    build_optimizer,
    check_applicable,
    compiled,
)
from trainprof.bench.results import StrategyResult
from trainprof.bench.strategies import Strategy
from trainprof.bench.workload import Workload, loss_of
from trainprof.capture.batches import batch_size_of
from trainprof.capture.steps import StepTimer

#: A failed strategy's reason keeps the error's first line, up to this many characters.
REASON_CHARS = 300


class RunSettings(msgspec.Struct, frozen=True):
    """How each strategy is measured: timed steps per repeat, warm-up steps, repeats, device."""

    steps: int
    warmup: int
    repeats: int
    device: str
    seed: int = 0


def run_strategy(workload: Workload, strategy: Strategy, settings: RunSettings) -> StrategyResult:
    """The strategy's measurements; skipped or failed (with the reason) instead of raising."""
    device = torch.device(settings.device)
    try:
        check_applicable(strategy, device, has_loader=workload.loader is not None)
        with warnings.catch_warnings():
            # PyTorch's own deprecation notices (e.g. as torch.compile imports its passes) say
            # nothing about the user's job.
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch(\.|$)")
            return _measure(workload, strategy, settings, device)
    except NotApplicable as exc:
        return StrategyResult(strategy.name, strategy.description, "skipped", str(exc))
    except Exception as exc:  # one strategy's failure must not stop the others
        return StrategyResult(strategy.name, strategy.description, "failed", describe_error(exc))
    finally:
        _release(device, strategy)


def skipped_here(workload: Workload, strategy: Strategy,
                 device: torch.device) -> StrategyResult | None:
    """The skipped row, when the strategy cannot apply whatever the model (no need to build it,
    nor to start a process for it)."""
    try:
        check_applicable(strategy, device, has_loader=workload.loader is not None)
    except NotApplicable as exc:
        return StrategyResult(strategy.name, strategy.description, "skipped", str(exc))
    return None


def describe_error(exc: BaseException) -> str:
    """`Type: first line of the message`, shortened."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def steps_for(steps: int, strategy: Strategy) -> int:
    """Optimizer steps that train on `steps` batches (gradient accumulation takes several)."""
    return math.ceil(steps / strategy.accumulation) if steps else 0


def _measure(workload: Workload, strategy: Strategy, settings: RunSettings,
             device: torch.device) -> StrategyResult:
    memory_known = reset_peak_memory(device)
    torch.manual_seed(settings.seed)
    model = build_model(workload.make_model, strategy, device)
    optimizer = build_optimizer(workload.make_optimizer, model, strategy)
    runnable = compiled(model, strategy)
    batches = batch_stream(workload, strategy, device)
    first = next(batches)
    micro = batch_size_of(first)
    samples = micro * strategy.accumulation if micro is not None else None
    units = _grouped(itertools.chain([first], batches), strategy.accumulation)
    warmup, steps = steps_for(settings.warmup, strategy), steps_for(settings.steps, strategy)
    step = training_step(runnable, optimizer, workload.loss_fn, strategy, device)
    timer = StepTimer(runnable, optimizer, batch_size=samples if strategy.accumulation > 1 else None,
                      seq_dim=workload.seq_dim, flops_per_step=0.0, log_every=None,
                      warmup_steps=warmup)
    with timer:
        for unit in timer.wrap(itertools.islice(units, warmup + settings.repeats * steps)):
            step(unit)
        times = timer.step_times_ms()
        summary = timer.summary()
    if len(times) != settings.repeats * steps:
        raise RuntimeError(f"the step timer measured {len(times)} of "
                           f"{settings.repeats * steps} steps")
    repeats = [times[i * steps:(i + 1) * steps] for i in range(settings.repeats)]
    return StrategyResult(
        strategy.name, strategy.description,
        samples_per_step=samples,
        repeat_samples_per_s=[samples * steps / (sum(r) / 1e3) for r in repeats] if samples else [],
        tokens_per_s=summary["tokens_per_s"],
        step_times_ms=times,
        phases_ms=summary["phases_ms"],
        peak_memory_bytes=summary["peak_memory_bytes"] if memory_known else None,
    )


def _grouped(batches: Iterator[Any], size: int) -> Iterator[Any]:
    """The batches themselves, or lists of `size` of them (one optimizer step's micro-batches)."""
    if size == 1:
        return batches
    return (list(itertools.islice(batches, size)) for _ in itertools.count())


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[..., Any] | None, strategy: Strategy,
                  device: torch.device) -> Callable[[Any], None]:
    """One optimizer step on a batch (a list of micro-batches with accumulation)."""
    scaler = torch.amp.GradScaler(device.type) if strategy.grad_scaler else None
    dtype, count = strategy.autocast, strategy.accumulation

    def step(unit: Any) -> None:
        for batch in unit if count > 1 else (unit,):
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = loss_of(model, batch, loss_fn)
            if count > 1:
                loss = loss / count
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _release(device: torch.device, strategy: Strategy) -> None:
    """Frees what the strategy left behind before the next one is measured."""
    with contextlib.suppress(Exception):  # a broken CUDA context must not hide the result
        if strategy.compile_mode is not None:
            torch._dynamo.reset()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
