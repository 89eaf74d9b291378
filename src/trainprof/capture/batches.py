"""Reading the batch size (and tokens) from a batch: the first tensor found, in order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

_MAX_TENSORS = 8  # enough to reach any model output or batch field that matters, cheap to walk


def tensors_in(value: Any, limit: int = _MAX_TENSORS) -> list[torch.Tensor]:
    """Tensors found in `value` (a tensor, or nested tuples, lists, dicts), at most `limit`."""
    found: list[torch.Tensor] = []
    stack = [value]
    while stack and len(found) < limit:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, Mapping):  # an ABC check, slower: last
            stack.extend(reversed(list(item.values())))
    return found


def batch_size_of(batch: Any) -> int | None:
    """The leading dimension of the batch's first tensor."""
    # The common shapes first, without a walk: this runs once per step.
    first = batch[0] if type(batch) in (tuple, list) and batch else batch
    if isinstance(first, torch.Tensor):
        return int(first.shape[0]) if first.dim() > 0 else None
    for tensor in tensors_in(batch, limit=1):
        if tensor.dim() > 0:
            return int(tensor.shape[0])
    return None


def tokens_of(batch: Any, samples: int | None, seq_dim: int) -> int | None:
    """Samples times the length along `seq_dim` of the first tensor that has that dimension."""
    if samples is None:
        return None
    for tensor in tensors_in(batch):
        if tensor.dim() > seq_dim:
            return samples * int(tensor.shape[seq_dim])
    return None
