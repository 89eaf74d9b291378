"""trainprof: find out why a PyTorch training run is slow, and what to change.

The public API, re-exported here. Analysis needs only numpy; recording needs torch, which is
imported only when a capture name is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainprof.errors import TraceError, TrainprofError

__version__ = "0.1.0"

__all__ = [
    "TraceError",
    "TrainprofError",
    "__version__",
    "analyze",
    "load",
    "profile",
    "ProfileConfig",
    "StepTimer",
    "RecordingWarning",
]

# Names served lazily, so that `import trainprof` stays cheap and torch-free.
_LAZY = {
    "load": ("trainprof.trace.load", "load"),
    "analyze": ("trainprof.pipeline", "analyze"),
    "profile": ("trainprof.capture.profiler", "profile"),
    "ProfileConfig": ("trainprof.capture.profiler", "ProfileConfig"),
    "StepTimer": ("trainprof.capture.steps", "StepTimer"),
    "RecordingWarning": ("trainprof.capture.safety", "RecordingWarning"),
}

if TYPE_CHECKING:  # pragma: no cover
    from trainprof.capture.profiler import ProfileConfig, profile
    from trainprof.capture.steps import StepTimer
    from trainprof.pipeline import analyze
    from trainprof.trace.load import load


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainprof' has no attribute {name!r}")
