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
    "load_snapshot",
    "memory_snapshot_report",
]

# Names served lazily, so that `import trainprof` stays cheap and torch-free.
_LAZY = {
    "load": ("trainprof.trace.load", "load"),
    "analyze": ("trainprof.pipeline", "analyze"),
    "profile": ("trainprof.capture.profiler", "profile"),
    "ProfileConfig": ("trainprof.capture.profiler", "ProfileConfig"),
    "StepTimer": ("trainprof.capture.steps", "StepTimer"),
    "RecordingWarning": ("trainprof.capture.safety", "RecordingWarning"),
    "load_snapshot": ("trainprof.trace.snapshot", "load_snapshot"),
    "memory_snapshot_report": ("trainprof.diagnose.snapshot", "memory_snapshot_report"),
}

if TYPE_CHECKING:  # pragma: no cover
    from trainprof.capture.profiler import ProfileConfig, profile
    from trainprof.capture.steps import StepTimer
    from trainprof.diagnose.snapshot import memory_snapshot_report
    from trainprof.pipeline import analyze
    from trainprof.trace.load import load
    from trainprof.trace.snapshot import load_snapshot


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainprof' has no attribute {name!r}")
