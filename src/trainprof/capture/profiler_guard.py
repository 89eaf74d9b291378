"""Two torch profilers cannot record at once: when the user's code starts its own while trainprof
records, trainprof's steps aside first.

Otherwise the second one fails to start ("Profiler is already enabled on this thread"), or both
share one Kineto session and the process crashes when either exports it (a segmentation fault in
torch 2.13). That happens with `trainprof run` on a script that profiles itself, and with a
`trainprof.profile()` around code that starts a profiler. `torch.profiler.profile.start` (which
`__enter__` calls) is wrapped for as long as a recording is watched, as `capture.backward` wraps
`torch.autograd.backward`.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import torch.profiler


class Yielding(Protocol):
    """A recording that owns `profiler` and can stop it when another profiler starts."""

    profiler: Any

    def step_aside(self) -> None: ...


_watched: list[weakref.ref[Yielding]] = []
_original_start: Callable[..., Any] | None = None


def watch(recording: Yielding) -> None:
    """Calls `recording.step_aside()` before any other torch profiler starts."""
    global _original_start
    if _original_start is None:
        _original_start = torch.profiler.profile.start
        torch.profiler.profile.start = _make_start(_original_start)  # type: ignore[method-assign]  # patched on purpose
    _watched.append(weakref.ref(recording))


def unwatch(recording: Yielding) -> None:
    """Stops watching; the last one out restores torch's method, if it is still ours."""
    global _original_start
    _watched[:] = [ref for ref in _watched if ref() is not None and ref() is not recording]
    current = torch.profiler.profile.start
    if not _watched and _original_start is not None and getattr(current, "_trainprof", False):
        torch.profiler.profile.start = _original_start  # type: ignore[method-assign]  # restored
        _original_start = None


def _make_start(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        for ref in list(_watched):
            recording = ref()
            if recording is not None and recording.profiler is not None \
                    and recording.profiler is not self:
                recording.step_aside()
        return original(self, *args, **kwargs)

    start._trainprof = True  # type: ignore[attr-defined]
    return start
