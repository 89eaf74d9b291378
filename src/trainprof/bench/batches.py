"""Where a strategy's batches come from: the workload's batch or loader, on the device, endlessly.

Moving a batch to the device happens as it is fetched, so a step's data phase is the loader's
work plus the copy, as in a training loop that moves each batch first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader

from trainprof.bench.prepare import NotApplicable
from trainprof.bench.strategies import Strategy
from trainprof.bench.workload import Workload


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`batch` with `fn` applied to every tensor in it (nested tuples, lists and dicts)."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_tensors(item, fn) for item in batch)
    if isinstance(batch, Mapping):
        return {key: map_tensors(value, fn) for key, value in batch.items()}
    return batch


def _repeated(tensor: torch.Tensor, times: int) -> torch.Tensor:
    return tensor.repeat(times, *[1] * (tensor.dim() - 1)) if tensor.dim() else tensor


def _channels_last(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous(memory_format=torch.channels_last) if tensor.dim() == 4 else tensor


def batch_stream(workload: Workload, strategy: Strategy, device: torch.device) -> Iterator[Any]:
    """The strategy's batches on `device`, for as many steps as asked."""
    if workload.make_batch is not None:
        batches: Iterator[Any] = _same_batch(workload.make_batch, strategy)
    else:
        batches = _cycle(_loader_for(workload.loader, strategy))
    non_blocking = strategy.pin_memory and device.type == "cuda"

    def prepared(batch: Any) -> Any:
        batch = map_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking))
        return map_tensors(batch, _channels_last) if strategy.channels_last else batch

    return (prepared(batch) for batch in batches)


def _same_batch(make_batch: Callable[[], Any], strategy: Strategy) -> Iterator[Any]:
    batch = make_batch()
    if strategy.batch_scale != 1:
        batch = map_tensors(batch, lambda t: _repeated(t, strategy.batch_scale))
    if strategy.pin_memory:
        batch = map_tensors(batch, lambda t: t.pin_memory() if t.device.type == "cpu" else t)
    while True:
        yield batch


def _loader_for(loader: Any, strategy: Strategy) -> Any:
    """A DataLoader like the workload's, with the strategy's workers, pinning and batch size;
    always without a ragged last batch (a new batch shape would recompile a compiled model)."""
    if not isinstance(loader, DataLoader):
        if strategy.changes_loader:
            raise NotApplicable(f"the loader is a {type(loader).__name__}, not a DataLoader that "
                                "trainprof can rebuild")
        return loader
    if loader.batch_size is None and type(loader.batch_sampler) is not BatchSampler:
        if strategy.changes_loader:
            raise NotApplicable("the DataLoader batches in its own way (a custom batch_sampler "
                                "or batch_size=None), which trainprof cannot rebuild")
        return loader
    workers = loader.num_workers if strategy.num_workers is None else strategy.num_workers
    sampler = loader.batch_sampler  # a BatchSampler where batch_size is None (checked above)
    batch_size = loader.batch_size or (sampler.batch_size if isinstance(sampler, BatchSampler)
                                       else None)
    if batch_size is None:  # never: either one is set
        raise NotApplicable("the DataLoader has no batch size trainprof can read")
    multiprocess = {"persistent_workers": True, "prefetch_factor": loader.prefetch_factor,
                    "worker_init_fn": loader.worker_init_fn, "timeout": loader.timeout,
                    "multiprocessing_context": loader.multiprocessing_context} if workers else {}
    return DataLoader(
        loader.dataset, batch_size=batch_size * strategy.batch_scale,
        sampler=None if _iterable(loader) else loader.sampler, collate_fn=loader.collate_fn,
        drop_last=True, num_workers=workers, pin_memory=loader.pin_memory or strategy.pin_memory,
        generator=loader.generator, **multiprocess,
    )


def _iterable(loader: DataLoader) -> bool:
    return isinstance(loader.dataset, torch.utils.data.IterableDataset)


def _cycle(loader: Any) -> Iterator[Any]:
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise NotApplicable("the loader yields no full batch (fewer samples than one batch)")

