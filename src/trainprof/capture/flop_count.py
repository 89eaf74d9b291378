"""The step timer's one-off FLOP count, off the training step: the first batch's shapes go
through a meta-device copy of the model, under `FlopCounterMode`, when a figure first needs it.

A meta tensor has a shape and a dtype but no data, so the copy costs no memory for the weights
and its forward and backward do no arithmetic. Meta kernels are mostly Python, so the count
costs per operator, not per FLOP (about 10 ms for a three-layer MLP on a 2-core machine), once,
never inside a step. The FLOPs are the model's forward and, when training, its backward (the
loss outside the model is not counted: `FlopCounterMode` counts matrix products and
convolutions, which a loss rarely has).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils._pytree import tree_map_only
from torch.utils.flop_counter import FlopCounterMode

from trainprof.capture.batches import tensors_in

_WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module", "OptimizedModule": "_orig_mod"}
_OUTPUT_TENSORS = 64  # enough for any model output's tensors that a loss reads


def meta_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The forward's arguments with every tensor (at any depth of tuples, lists and dicts)
    replaced by a meta tensor of the same shape, dtype and `requires_grad`: no data is kept."""
    return _to_meta(args), _to_meta(kwargs)


def meta_flops(model: torch.nn.Module, inputs: tuple[tuple, dict], backward: bool, owner: Any) -> float:
    """FLOPs of one forward (and backward) of `model` on `inputs` (from `meta_inputs`), run on
    a meta-device copy; the hooks of `owner` (the step timer) are left out of the copy.
    Raises what the copy raises (ops with no meta kernel, data-dependent shapes, a model that
    cannot be copied)."""
    twin = _meta_copy(unwrapped(model), owner)
    args, kwargs = inputs
    with FlopCounterMode(display=False) as counter:
        output = twin(*args, **kwargs)
        if backward:
            _backward(twin, output, args, kwargs)
    return float(counter.get_total_flops())


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside DistributedDataParallel, DataParallel or `torch.compile` (the same
    forward, and a copy that needs no process group)."""
    while type(model).__name__ in _WRAPPERS:
        model = getattr(model, _WRAPPERS[type(model).__name__])
    return model


def _to_meta(value: Any) -> Any:
    return tree_map_only(torch.Tensor, _meta_tensor, value)


def _meta_tensor(tensor: torch.Tensor) -> torch.Tensor:
    twin = torch.empty_like(tensor, device="meta")
    return twin.requires_grad_() if tensor.requires_grad and twin.is_floating_point() else twin


def _meta_copy(model: torch.nn.Module, owner: Any) -> torch.nn.Module:
    """`copy.deepcopy` with every parameter, buffer and tensor attribute mapped to a meta tensor
    beforehand (so none is copied), and `owner`'s hooks removed from the copy."""
    memo: dict[int, Any] = {id(owner): owner}  # its bound-method hooks must not copy it
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                memo[id(value)] = _meta_tensor(value)
        for tensor in (*module._parameters.values(), *module._buffers.values()):
            if tensor is None or id(tensor) in memo:
                continue
            twin = torch.empty_like(tensor, device="meta")
            if isinstance(tensor, torch.nn.Parameter):
                twin = torch.nn.Parameter(twin, requires_grad=tensor.requires_grad)
            memo[id(tensor)] = twin
    twin_model = copy.deepcopy(model, memo)
    for module in twin_model.modules():
        for hooks in (module._forward_pre_hooks, module._forward_hooks):
            for key in [k for k, hook in hooks.items() if getattr(hook, "__self__", None) is owner]:
                del hooks[key]
    return twin_model


def _backward(model: torch.nn.Module, output: Any, args: tuple, kwargs: dict) -> None:
    """The gradients a training step computes: of a scalar output (the loss, when the model
    returns one first), else of the sum of its outputs, for every leaf that requires them."""
    outputs = [t for t in tensors_in(output, limit=_OUTPUT_TENSORS) if t.requires_grad]
    if not outputs:
        return
    loss = outputs[0]
    if loss.dim():
        loss = loss.sum()
        for t in outputs[1:]:
            loss = loss + t.sum()
    leaves: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
    leaves += [t for t in tensors_in((args, kwargs), limit=_OUTPUT_TENSORS) if t.requires_grad and t.is_leaf]
    if leaves:
        torch.autograd.grad(loss, leaves, allow_unused=True)
