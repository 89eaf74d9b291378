"""Seeing every backward pass start and end, at no cost per step.

`torch.autograd.backward` (which `Tensor.backward`, accelerate, Lightning and GradScaler all go
through) is wrapped once for the process while a listener is registered. A hook on the model's
output would have to be registered again at every step, because the autograd graph is rebuilt
each time: that costs 25-50 µs per step on a slow CPU, half the step timer's budget; this wrapper
costs one Python call. It is also exact: the loss's own backward counts, and the end is the
moment `backward()` returns, when every gradient is ready.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import torch


class BackwardListener(Protocol):
    def on_backward_start(self) -> None: ...

    def on_backward_end(self) -> None: ...


# Weak references: a step timer that is dropped without close() must not be kept alive, nor
# called at every backward pass, for the rest of the process. A tuple, replaced (never changed)
# when a listener comes or goes, so that the wrapper can walk it while that happens.
_listeners: tuple[weakref.ref[BackwardListener], ...] = ()
_original: Callable[..., Any] | None = None


def add_listener(listener: BackwardListener) -> None:
    """Calls `listener.on_backward_start/_end` around each `torch.autograd.backward` call."""
    global _original, _listeners
    if _original is None:
        _original = torch.autograd.backward
        torch.autograd.backward = _make_wrapper(_original)
    _listeners = (*_listeners, weakref.ref(listener))


def remove_listener(listener: BackwardListener) -> None:
    """Stops the calls; the last listener out restores torch's function, if it is still ours."""
    global _original, _listeners
    _listeners = tuple(ref for ref in _listeners if ref() is not None and ref() is not listener)
    if not _listeners and _original is not None and getattr(torch.autograd.backward, "_trainprof", False):
        torch.autograd.backward = _original
        _original = None


def _make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        listeners = []  # the ones started are the ones ended, whatever comes or goes meanwhile
        for ref in _listeners:
            listener = ref()
            if listener is not None:
                listener.on_backward_start()
                listeners.append(listener)
        try:
            return original(*args, **kwargs)
        finally:
            for listener in listeners:
                listener.on_backward_end()

    backward._trainprof = True  # type: ignore[attr-defined]
    return backward
