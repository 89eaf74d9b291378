"""`trainprof.bench.checklist`: data loading, forward, backward and the optimizer step, each timed
on its own with PyTorch's benchmark timer, and their shares judged (`bench.health`).

Timed alone, a phase runs back to back: the data phase is what the loader needs per batch by
itself (DataLoader workers that would hide it behind the step still count in full), and
backward is timed on one graph kept with `retain_graph=True`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.benchmark import Timer

from trainprof.bench.batches import batch_stream
from trainprof.bench.health import Checklist, judge
from trainprof.bench.prepare import build_model, build_optimizer, resolve_device
from trainprof.bench.strategies import BUILTIN
from trainprof.bench.training import describe_error, training_step
from trainprof.bench.workload import Workload, loss_of, workload_from
from trainprof.errors import BenchError

#: Seconds each phase is timed for, at least (`Timer.blocked_autorange(min_run_time=...)`).
DEFAULT_MIN_RUN_TIME_S = 0.5
#: Full training steps before timing: gradients, optimizer state and caches exist by then.
DEFAULT_WARMUP = 3


def checklist(
    make_model: Callable[[], torch.nn.Module] | None = None,
    make_batch: Callable[[], Any] | None = None,
    *,
    loader: Any = None,
    loss_fn: Callable[..., Any] | None = None,
    make_optimizer: Callable[..., torch.optim.Optimizer] | None = None,
    workload: Workload | None = None,
    device: str | torch.device | None = None,
    min_run_time_s: float = DEFAULT_MIN_RUN_TIME_S,
    warmup: int = DEFAULT_WARMUP,
    seed: int = 0,
) -> Checklist:
    """Times each phase of the job's training step and judges their shares of the step.

    The job is given as for `compare()`. Raises `trainprof.BenchError` on bad input.
    """
    job = workload_from(workload, make_model, make_batch=make_batch, loader=loader,
                        loss_fn=loss_fn, make_optimizer=make_optimizer)
    if not min_run_time_s > 0 or isinstance(warmup, bool) or not isinstance(warmup, int) \
            or warmup < 1:
        raise BenchError("min_run_time_s must be positive and warmup an integer of at least 1.")
    target = resolve_device(device)
    baseline = BUILTIN["fp32"]
    torch.manual_seed(seed)
    try:
        model = build_model(job.make_model, baseline, target)
        optimizer = build_optimizer(job.make_optimizer, model, baseline)
        batches = batch_stream(job, baseline, target)
        step = training_step(model, optimizer, job.loss_fn, baseline, target)
        for _ in range(warmup):
            step(next(batches))
        timings, backward_method = _phase_times(model, optimizer, job, batches, min_run_time_s)
    except BenchError:
        raise
    except Exception as exc:  # the workload failing to train is bad input, not our bug
        raise BenchError(f"cannot train this workload ({describe_error(exc)}).") from exc
    method = {
        "timer": "torch.utils.benchmark.Timer.blocked_autorange",
        "statistic": "median",
        "min_run_time_s": min_run_time_s,
        "threads": torch.get_num_threads(),
        "runs": {phase: runs for phase, (_, runs) in timings.items()},
        "backward": backward_method,
    }
    return judge({phase: ms for phase, (ms, _) in timings.items()}, str(target), method)


def _phase_times(model: torch.nn.Module, optimizer: torch.optim.Optimizer, job: Workload,
                 batches: Any, min_run_time_s: float) -> tuple[dict[str, tuple[float, int]], str]:
    """{phase: (median ms, runs timed)} for the four phases, and how backward was timed."""
    def timed(stmt: str, **names: Any) -> tuple[float, int]:
        timer = Timer(stmt=stmt, globals=names, num_threads=torch.get_num_threads())
        measurement = timer.blocked_autorange(min_run_time=min_run_time_s)
        return measurement.median * 1e3, len(measurement.raw_times) * measurement.number_per_run

    batch = next(batches)
    env = {"model": model, "batch": batch, "loss_fn": job.loss_fn, "loss_of": loss_of}
    times: dict[str, tuple[float, int]] = {
        "data": timed("next(batches)", batches=batches),
        "forward": timed("loss_of(model, batch, loss_fn)", **env),
    }
    optimizer.zero_grad(set_to_none=False)
    try:
        loss = loss_of(model, batch, job.loss_fn)
        times["backward"] = timed("loss.backward(retain_graph=True)", loss=loss)
        backward_method = "one graph, retain_graph=True"
    except RuntimeError:  # e.g. a compiled model's graph cannot be kept: forward+backward - forward
        both = timed("loss_of(model, batch, loss_fn).backward()", **env)
        times["backward"] = (max(0.0, both[0] - times["forward"][0]), both[1])
        backward_method = "forward and backward, minus forward"
    times["optimizer"] = timed("optimizer.step()", optimizer=optimizer)
    return times, backward_method
