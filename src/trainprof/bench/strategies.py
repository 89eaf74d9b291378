"""The strategies a benchmark compares: each changes one thing about how the same model trains.

Strategies are plain data (so that they travel to the processes `isolate=True` starts): the
training loop (`bench.training`) reads their fields. `resolve` turns names into strategies:
the built-in ones below, `accum<N>`, `workers<N>`, `batch<N>x`, and combinations such as
`bf16+compile`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import torch

from trainprof import structs
from trainprof.errors import BenchError

#: Gradient accumulation of the built-in `accum4`: micro-batches per optimizer step.
DEFAULT_ACCUMULATION = 4
#: DataLoader workers of the built-in `workers` strategy: 4, or fewer on a smaller machine.
DEFAULT_WORKERS = min(4, os.cpu_count() or 1)
#: The optimizer implementations a strategy can ask for (see torch.optim's docs).
OPTIMIZER_IMPLEMENTATIONS = ("foreach", "fused", "for-loop")


class Strategy(msgspec.Struct, frozen=True):
    """One way to train the same model. A field left at its default changes nothing.

    `autocast`: the dtype of `torch.autocast` around the forward pass and the loss;
    `grad_scaler`: scale the loss (`torch.amp.GradScaler`); `accumulation`: micro-batches per
    optimizer step; `compile_mode`: `torch.compile(model, mode=...)`; `channels_last`: model and
    4-D inputs in channels-last memory format; `optimizer_impl`: "foreach", "fused" or
    "for-loop"; `num_workers`, `pin_memory`: the DataLoader's; `batch_scale`: samples per batch
    times this; `prepare_model`: any other change, as a function of the model (module level,
    for `isolate=True`).
    """

    name: str
    description: str = ""
    autocast: torch.dtype | None = None
    grad_scaler: bool = False
    accumulation: int = 1
    compile_mode: str | None = None
    channels_last: bool = False
    optimizer_impl: str | None = None
    num_workers: int | None = None
    pin_memory: bool = False
    batch_scale: int = 1
    prepare_model: Callable[[torch.nn.Module], torch.nn.Module] | None = None

    def __post_init__(self) -> None:
        if self.accumulation < 1 or self.batch_scale < 1:
            raise BenchError(f"strategy {self.name}: accumulation and batch_scale must be >= 1.")
        if self.optimizer_impl not in (None, *OPTIMIZER_IMPLEMENTATIONS):
            raise BenchError(f"strategy {self.name}: optimizer_impl must be one of "
                             f"{', '.join(OPTIMIZER_IMPLEMENTATIONS)}.")

    @property
    def changes_loader(self) -> bool:
        return self.num_workers is not None or self.pin_memory or self.batch_scale != 1

    def __add__(self, other: Strategy) -> Strategy:
        return combine(self, other)


BUILTIN: dict[str, Strategy] = {s.name: s for s in (
    Strategy("fp32", "the baseline: float32, the model and loop as given"),
    Strategy("bf16", "bfloat16 autocast (forward and loss)", autocast=torch.bfloat16),
    Strategy("fp16", "float16 autocast with a GradScaler", autocast=torch.float16,
             grad_scaler=True),
    Strategy(f"accum{DEFAULT_ACCUMULATION}",
             f"gradient accumulation: one optimizer step per {DEFAULT_ACCUMULATION} batches",
             accumulation=DEFAULT_ACCUMULATION),
    Strategy("compile", "torch.compile(model)", compile_mode="default"),
    Strategy("compile-reduce-overhead", "torch.compile(model, mode='reduce-overhead')",
             compile_mode="reduce-overhead"),
    Strategy("channels-last", "model and 4-D inputs in channels-last memory format",
             channels_last=True),
    Strategy("foreach", "optimizer with foreach=True (one kernel per op over all tensors)",
             optimizer_impl="foreach"),
    Strategy("fused", "optimizer with fused=True (one kernel for the whole update)",
             optimizer_impl="fused"),
    Strategy("workers", f"DataLoader(num_workers={DEFAULT_WORKERS}, persistent_workers=True)",
             num_workers=DEFAULT_WORKERS),
    Strategy("pinned", "DataLoader(pin_memory=True) and non-blocking copies", pin_memory=True),
)}
#: Built-in strategies outside the default set, asked for by name.
EXTRA: dict[str, Strategy] = {
    "for-loop": Strategy("for-loop", "optimizer with foreach=False: a loop over the tensors",
                         optimizer_impl="for-loop"),
}
#: What `compare()` and `trainprof bench` run when no strategies are named.
DEFAULT_SET: tuple[str, ...] = tuple(BUILTIN)

_PATTERNS: tuple[tuple[re.Pattern[str], Callable[[int], Strategy]], ...] = (
    (re.compile(r"accum(\d+)"), lambda n: Strategy(
        f"accum{n}", f"gradient accumulation: one optimizer step per {n} batches",
        accumulation=n)),
    (re.compile(r"workers(\d+)"), lambda n: Strategy(
        f"workers{n}", f"DataLoader(num_workers={n}, persistent_workers=True)", num_workers=n)),
    (re.compile(r"batch(\d+)x"), lambda n: Strategy(
        f"batch{n}x", f"{n} times the samples per batch", batch_scale=n)),
)


def resolve(spec: str | Strategy) -> Strategy:
    """The strategy a name stands for (`bf16`, `accum8`, `bf16+compile`), or `spec` itself."""
    if isinstance(spec, Strategy):
        return spec
    parts = [_one(part.strip()) for part in spec.split("+")]
    result = parts[0]
    for part in parts[1:]:
        result = combine(result, part)
    return result


def resolve_all(specs: Iterable[str | Strategy] | None) -> list[Strategy]:
    """The strategies to run, in order (the default set when `specs` is None); names unique."""
    strategies = [resolve(s) for s in (DEFAULT_SET if specs is None else specs)]
    if not strategies:
        raise BenchError("no strategy to run.")
    names = [s.name for s in strategies]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BenchError(f"strategy names must be unique: {', '.join(duplicates)} appears twice.")
    return strategies


def known_names() -> list[str]:
    return [*BUILTIN, *EXTRA, "accum<N>", "workers<N>", "batch<N>x"]


def combine(first: Strategy, second: Strategy) -> Strategy:
    """Both strategies' changes at once; an error when both change the same thing differently."""
    changes: dict[str, Any] = {}
    for field in structs.fields(Strategy)[2:]:
        a, b = getattr(first, field.name), getattr(second, field.name)
        if b == field.default or a == b:
            continue
        if a != field.default:
            raise BenchError(f"cannot combine {first.name} and {second.name}: both set "
                             f"{field.name}.")
        changes[field.name] = b
    return structs.replace(first, name=f"{first.name}+{second.name}",
                               description=f"{first.description}; {second.description}",
                               **changes)


def _one(name: str) -> Strategy:
    if name in BUILTIN or name in EXTRA:
        return BUILTIN.get(name) or EXTRA[name]
    for pattern, make in _PATTERNS:
        match = pattern.fullmatch(name)
        if match and int(match.group(1)) >= 1:
            return make(int(match.group(1)))
    raise BenchError(f"unknown strategy {name!r}; known: {', '.join(known_names())}.")
