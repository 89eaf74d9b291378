"""What a benchmark trains: the model, where its batches come from, the loss and the optimizer."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import torch
from torch import nn

from trainprof.errors import BenchError

#: Batches in the demo's dataset (made on the fly): enough that no run reaches the end of an
#: epoch, where DataLoader workers would start again from an empty queue.
DEMO_BATCHES = 1000


def default_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW at lr 1e-3, in PyTorch's default implementation (foreach on a GPU, a for-loop on
    the CPU)."""
    return torch.optim.AdamW(params, lr=1e-3)


class Workload(msgspec.Struct):
    """One training job to benchmark. Give `make_batch` (called once per strategy: the same batch
    is trained on at every step) or `loader` (a DataLoader, gone round as often as needed).

    A batch `(inputs, target)` trains as `loss_fn(model(inputs), target)`; a dict as
    `loss_fn(model(**batch), batch)`; anything else as `loss_fn(model(batch), batch)`. Without
    `loss_fn`, the model's output is the loss (a tensor, or an object with a `loss`).
    `seq_dim` (e.g. 1 for (batch, seq) token ids) turns on tokens/s.
    """

    make_model: Callable[[], nn.Module]
    make_batch: Callable[[], Any] | None = None
    loader: Any = None
    loss_fn: Callable[..., Any] | None = None
    make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] = default_optimizer
    seq_dim: int | None = None

    def __post_init__(self) -> None:
        if not callable(self.make_model):
            raise BenchError("make_model must be a function that returns a fresh model.")
        if (self.make_batch is None) == (self.loader is None):
            raise BenchError("give exactly one source of batches: make_batch or loader.")
        if self.make_batch is not None and not callable(self.make_batch):
            raise BenchError("make_batch must be a function that returns one batch.")


def loss_of(model: nn.Module, batch: Any, loss_fn: Callable[..., Any] | None) -> torch.Tensor:
    """The forward pass and the loss, by the batch conventions `Workload` describes."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        output, target = model(batch[0]), batch[1]
    elif isinstance(batch, Mapping):
        output, target = model(**batch), batch
    else:
        output, target = model(batch), batch
    if loss_fn is not None:
        return loss_fn(output, target)
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", output)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise BenchError("the model's output is not a loss: pass loss_fn.")
    return loss


def demo_optimizer(params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer `trainprof demo` trains with."""
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def demo_workload() -> Workload:
    """`trainprof demo`'s job: a small CNN fed by a DataLoader that decodes images in Python."""
    from torch.utils.data import DataLoader

    from trainprof.demo import BATCH_SIZE, SlowlyDecodedImages, small_cnn

    loader = DataLoader(SlowlyDecodedImages(DEMO_BATCHES * BATCH_SIZE), batch_size=BATCH_SIZE)
    return Workload(make_model=small_cnn, loader=loader, loss_fn=nn.CrossEntropyLoss(),
                    make_optimizer=demo_optimizer)


def load_workload(spec: str) -> Workload:
    """The `Workload` named by `module:name` or `path/to/file.py:name` (an instance, or a function
    of no arguments that returns one).

    A file is imported as a module named after it, with its folder put first on `sys.path`, so
    that its functions can be sent to the processes `isolate=True` starts.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise BenchError(f"cannot read workload {spec!r}: write module:name or file.py:name.")
    module = _import(module_name)
    if not hasattr(module, attr):
        raise BenchError(f"{module_name} has no {attr!r}.")
    workload = getattr(module, attr)
    if callable(workload) and not isinstance(workload, Workload):
        try:
            workload = workload()
        except Exception as exc:  # the user's function failing is bad input, not our bug
            raise BenchError(f"calling {spec} failed ({type(exc).__name__}: {exc}).") from exc
    if not isinstance(workload, Workload):
        raise BenchError(f"{spec} is not a trainprof.bench.Workload (it is a "
                         f"{type(workload).__name__}).")
    return workload


def _import(name: str) -> Any:
    path = Path(name)
    if path.suffix == ".py":
        if not path.is_file():
            raise BenchError(f"no such file: {name}.")
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = path.stem
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the user's module failing to import is bad input, not our bug
        raise BenchError(f"cannot import {name} ({type(exc).__name__}: {exc}).") from exc


def workload_from(workload: Workload | None, make_model: Callable[[], nn.Module] | None,
                  **parts: Any) -> Workload:
    """`workload`, or one made of `make_model` and the other parts given (not both)."""
    given = {key: value for key, value in parts.items() if value is not None}
    if workload is not None:
        if make_model is not None or given:
            raise BenchError("give a workload or its parts (make_model, ...), not both.")
        return workload
    if make_model is None:
        raise BenchError("give make_model (a function that returns a fresh model) or a workload.")
    return Workload(make_model=make_model, **given)


def workload_for(spec: str | None, demo: bool) -> Workload:
    """The command line's choice: `load_workload(spec)`, or `demo_workload()` with `demo`."""
    if demo == bool(spec):
        raise BenchError("give a workload (module:name or file.py:name) or --demo, not both.")
    return demo_workload() if demo else load_workload(spec or "")
