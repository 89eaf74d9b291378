"""`trainprof.bench.compare`: the same training job under each strategy, measured side by side."""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable
from typing import Any

import torch

from trainprof.bench.isolation import run_isolated
from trainprof.bench.prepare import resolve_device
from trainprof.bench.results import BenchResult, StrategyResult, set_relative_speeds
from trainprof.bench.strategies import Strategy, resolve_all
from trainprof.bench.training import RunSettings, run_strategy, skipped_here
from trainprof.bench.workload import Workload, workload_from
from trainprof.errors import BenchError

#: Defaults: timed steps per repeat, warm-up steps (once per strategy, before the repeats),
#: and repeats (their spread is the throughput's).
DEFAULT_STEPS = 20
DEFAULT_WARMUP = 3
DEFAULT_REPEATS = 3
#: The baseline when none is named and the strategies include it.
BASELINE = "fp32"


def compare(
    strategies: Iterable[str | Strategy] | None = None,
    make_model: Callable[[], torch.nn.Module] | None = None,
    make_batch: Callable[[], Any] | None = None,
    *,
    loader: Any = None,
    loss_fn: Callable[..., Any] | None = None,
    make_optimizer: Callable[..., torch.optim.Optimizer] | None = None,
    seq_dim: int | None = None,
    workload: Workload | None = None,
    steps: int = DEFAULT_STEPS,
    warmup: int = DEFAULT_WARMUP,
    repeats: int = DEFAULT_REPEATS,
    device: str | torch.device | None = None,
    isolate: bool = False,
    timeout_s: float | None = None,
    baseline: str | None = None,
    seed: int = 0,
    recheck: bool = True,
    on_start: Callable[[Strategy, int, int], None] | None = None,
) -> BenchResult:
    """Trains a fresh model and optimizer under each strategy and measures it.

    `strategies`: names (see `trainprof.bench.strategies`) or `Strategy` objects; None runs the
    default set. The job is `make_model` with `make_batch` or `loader` (and optionally
    `loss_fn`, `make_optimizer`, `seq_dim`), or a `workload`. Each strategy trains `warmup`
    steps, then `repeats` times `steps` timed steps. With `isolate`, each runs in its own
    process (stopped after `timeout_s` seconds, when given). `baseline` names the row the
    others are compared with (default "fp32", else the first); with `recheck`, it runs again
    at the end, to show whether the machine's speed changed meanwhile. `on_start(strategy,
    index, count)` is called as each strategy begins. Raises `trainprof.BenchError` on bad input;
    a strategy that does not apply or fails gets a row that says why.
    """
    job = workload_from(workload, make_model, make_batch=make_batch, loader=loader,
                        loss_fn=loss_fn, make_optimizer=make_optimizer, seq_dim=seq_dim)
    chosen = resolve_all(strategies)
    _check_counts(steps=steps, warmup=warmup, repeats=repeats)
    if timeout_s is not None and (not isolate or timeout_s <= 0):
        raise BenchError("timeout_s needs isolate=True and a positive number of seconds.")
    names = [s.name for s in chosen]
    if baseline is None:
        baseline = BASELINE if BASELINE in names else names[0]
    elif baseline not in names:
        raise BenchError(f"the baseline {baseline!r} is not among the strategies "
                         f"({', '.join(names)}).")
    target = resolve_device(device)
    settings = RunSettings(steps=steps, warmup=warmup, repeats=repeats, device=str(target),
                           seed=seed)

    def run(strategy: Strategy) -> StrategyResult:
        skipped = skipped_here(job, strategy, target)
        if skipped is not None:
            return skipped
        if isolate:
            return run_isolated(job, strategy, settings, timeout_s)
        return run_strategy(job, strategy, settings)

    rows: list[StrategyResult] = []
    for index, strategy in enumerate(chosen):
        if on_start is not None:
            on_start(strategy, index, len(chosen))
        rows.append(run(strategy))
    set_relative_speeds(rows, baseline)
    base = rows[names.index(baseline)]
    again = None
    if recheck and len(rows) > 1 and base.ok:
        strategy = chosen[names.index(baseline)]
        if on_start is not None:
            on_start(strategy, len(chosen), len(chosen) + 1)
        again = run(strategy).samples_per_s
    return BenchResult(
        strategies=rows, baseline=baseline, device=str(target),
        settings={"steps": steps, "warmup": warmup, "repeats": repeats, "isolate": isolate,
                  "timeout_s": timeout_s, "seed": seed, "recheck": recheck},
        environment=environment(target), baseline_again_samples_per_s=again,
    )


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        least = 0 if name == "warmup" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise BenchError(f"{name} must be an integer of at least {least}, not {value!r}.")


def environment(device: torch.device) -> dict[str, Any]:
    """What the numbers depend on: PyTorch's version, threads, the device's name."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return {"torch": str(torch.__version__), "threads": torch.get_num_threads(),
            "device_name": name, "python": platform.python_version()}


def _cpu_name() -> str:
    """The CPU's model name on Linux; the architecture elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
