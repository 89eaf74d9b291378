"""Facts several sections share (the call tree, launch links), computed once per trace."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from trainprof.trace.model import Trace

T = TypeVar("T")

# Stored on the trace object itself, so the cache lives and dies with the trace.
_ATTRIBUTE = "_trainprof_shared_facts"


def per_trace(fn: Callable[[Trace], T]) -> Callable[[Trace], T]:
    """Memoise ``fn(trace)`` on the trace."""
    key = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(trace: Trace) -> T:
        store = trace.__dict__.setdefault(_ATTRIBUTE, {})
        if key not in store:
            store[key] = fn(trace)
        return store[key]

    return wrapper
