"""Where in the user's code an op was called: call stacks and Python frames of the call tree.

Two sources: the ``Call stack`` argument of ops (``with_stack=True`` in PyTorch 1.x, frames
separated by ';', innermost first), and, in PyTorch 2.x traces, the ``python_function`` events
around the op in the call tree. The source line is the innermost frame outside PyTorch, the
training frameworks and the interpreter's built-ins (``trace.model.is_source_frame``).
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis.calls.calltree import CallTree
from trainprof.trace.model import Kind, Trace, is_source_frame

#: User-code frames kept per call stack in results (innermost first).
MAX_FRAMES = 6


def split_stack(stack: str) -> list[str]:
    """The frames of a ``Call stack`` string, innermost first."""
    return [f.strip() for f in stack.split(";") if f.strip()]


def source_frame(frames: list[str]) -> str | None:
    """The first frame of the user's code, or None when every frame is a library's."""
    return next((f for f in frames if is_source_frame(f)), None)


def user_frames(stack: str) -> list[str]:
    """The frames of the user's code in a ``Call stack``, innermost first, at most MAX_FRAMES."""
    return [f for f in split_stack(stack) if is_source_frame(f)][:MAX_FRAMES]


def stack_sources(trace: Trace) -> list[str | None]:
    """The source frame of each entry of ``trace.events.stacks``."""
    return [source_frame(split_stack(s)) for s in trace.events.stacks]


def python_sources(trace: Trace, tree: CallTree) -> np.ndarray:
    """For each tree node, the nearest enclosing Python frame of the user's code (node, or -1)."""
    ev = trace.events
    kinds = ev.kind[tree.event]
    if not (kinds == Kind.PYTHON).any():
        return np.full(len(tree), -1, dtype=np.int64)
    user = np.array([is_source_frame(n) for n in ev.names], dtype=bool)
    mark = (kinds == Kind.PYTHON) & user[ev.name[tree.event]]
    return tree.nearest(mark, include_self=False)


def node_sources(trace: Trace, tree: CallTree, nodes: np.ndarray) -> list[str | None]:
    """The source line of each node: from the node's own call stack, else from the nearest op
    above it that has one, else from the Python frames around it."""
    ev = trace.events
    if not len(nodes):
        return []
    out: list[str | None] = [None] * len(nodes)
    if ev.stacks:
        has_stack = ev.stack[tree.event] >= 0
        holder = tree.nearest(has_stack)[nodes]
        sources = stack_sources(trace)
        for k, h in enumerate(holder):
            if h >= 0:
                out[k] = sources[ev.stack[tree.event[h]]]
    frame = python_sources(trace, tree)[nodes]
    for k, f in enumerate(frame):
        if out[k] is None and f >= 0:
            out[k] = ev.names[ev.name[tree.event[f]]]
    return out
