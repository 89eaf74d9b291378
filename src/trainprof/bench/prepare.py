"""A strategy's model and optimizer, built fresh; and why a strategy does not apply here."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from trainprof.bench.strategies import Strategy
from trainprof.errors import BenchError


class NotApplicable(Exception):
    """The strategy does not apply to this device or workload; the message says why."""


def check_applicable(strategy: Strategy, device: torch.device, has_loader: bool) -> None:
    """Raises `NotApplicable` when the device, or a workload without a DataLoader, cannot run
    the strategy; what needs the model or the optimizer is found out as they are built."""
    if strategy.num_workers is not None and not has_loader:
        raise NotApplicable("DataLoader workers need a loader; this workload makes one batch")
    kind = device.type
    if strategy.grad_scaler and kind != "cuda":
        raise NotApplicable(f"fp16 with a GradScaler is for CUDA GPUs; on {kind}, bf16 is the "
                            "reduced precision to try (it needs no loss scaling)")
    available = getattr(torch.amp, "is_autocast_available", lambda k: k in ("cpu", "cuda"))
    if strategy.autocast is not None and not available(kind):
        raise NotApplicable(f"torch.autocast does not support {kind}")
    if strategy.autocast == torch.bfloat16 and kind == "cuda" and not _native_bf16(device):
        raise NotApplicable(f"{torch.cuda.get_device_name(device)} has no native bfloat16 "
                            "(compute capability 8.0 or later needed)")
    if strategy.compile_mode == "reduce-overhead" and kind != "cuda":
        raise NotApplicable("mode='reduce-overhead' replays CUDA graphs, which need a CUDA device")
    if strategy.pin_memory and kind != "cuda":
        raise NotApplicable(f"pinned memory speeds up copies to a GPU; this run is on {kind}")


def _native_bf16(device: torch.device) -> bool:
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # PyTorch before 2.4
        return torch.cuda.get_device_capability(device) >= (8, 0)


def build_model(make_model: Callable[[], nn.Module], strategy: Strategy,
                device: torch.device) -> nn.Module:
    """A fresh model on `device`, in the strategy's memory format, not yet compiled."""
    model = make_model().to(device)
    if strategy.channels_last:
        if not any(isinstance(m, nn.Conv2d) for m in model.modules()):
            raise NotApplicable("the model has no 2-D convolution: channels-last changes nothing")
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs lack it
    if strategy.prepare_model is not None:
        model = strategy.prepare_model(model)
    return model


def compiled(model: nn.Module, strategy: Strategy) -> nn.Module:
    """`torch.compile(model, mode=...)` when the strategy asks for it, else the model itself."""
    if strategy.compile_mode is None:
        return model
    return torch.compile(model, mode=strategy.compile_mode)  # type: ignore[return-value]


def build_optimizer(make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer],
                    model: nn.Module, strategy: Strategy) -> torch.optim.Optimizer:
    """The workload's optimizer over the model's parameters, in the strategy's implementation."""
    optimizer = make_optimizer(model.parameters())
    if strategy.optimizer_impl is None:
        return optimizer
    return _reimplemented(optimizer, strategy.optimizer_impl)


def _reimplemented(optimizer: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """The same optimizer (class, parameter groups, hyper-parameters) with foreach/fused set."""
    cls, defaults = type(optimizer), optimizer.defaults
    wanted = "fused" if impl == "fused" else "foreach"
    if wanted not in defaults:
        raise NotApplicable(f"{cls.__name__} has no {wanted}= implementation")
    flags: dict[str, Any] = {"foreach": impl == "foreach"} if "foreach" in defaults else {}
    if "fused" in defaults:
        flags["fused"] = impl == "fused"
    groups = [{**group, **flags} for group in optimizer.param_groups]
    try:
        return cls(groups, **flags)
    except (RuntimeError, ValueError, TypeError) as exc:  # e.g. fused on an unsupported device
        raise NotApplicable(f"{cls.__name__}({wanted}=True) here: {exc}") from exc


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`device`, checked; by default the GPU when there is one, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BenchError(f"unknown device {device!r}.") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise BenchError(f"device {device!r} asked for, but PyTorch sees no CUDA GPU here.")
    if resolved.type not in ("cpu", "cuda"):
        raise BenchError(f"device {device!r}: trainprof bench runs on cpu or cuda.")
    return resolved
