"""trainprof: find out why a PyTorch training run is slow, and what to change.

The public API, re-exported here. Analysis needs only numpy; recording needs torch, which is
imported only when a capture name is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainprof.display import Renderer, use_notebook_renderer
from trainprof.errors import TraceError, TrainprofError
from trainprof.lazy import lazy_names
from trainprof.version import __version__

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
    "log_analysis",
]

# Names served lazily, so that `import trainprof` stays cheap and torch-free.
_LAZY = {
    "load": "trainprof.trace.load",
    "analyze": "trainprof.pipeline",
    "profile": "trainprof.capture.profiler",
    "ProfileConfig": "trainprof.capture.profiler",
    "StepTimer": "trainprof.step_timer",
    "RecordingWarning": "trainprof.capture.safety",
    "load_snapshot": "trainprof.trace.snapshot",
    "memory_snapshot_report": "trainprof.diagnose.snapshot",
    "log_analysis": "trainprof.trackers.api",
}

if TYPE_CHECKING:  # pragma: no cover
    from trainprof.capture.profiler import ProfileConfig, profile
    from trainprof.diagnose.snapshot import memory_snapshot_report
    from trainprof.pipeline import analyze
    from trainprof.step_timer import StepTimer
    from trainprof.trace.load import load
    from trainprof.trace.snapshot import load_snapshot
    from trainprof.trackers.api import log_analysis


__getattr__ = lazy_names(__name__, _LAZY)


def _notebook_renderer() -> tuple[Renderer, Renderer]:
    """The report layer's notebook views of results (trainprof/display.py)."""
    from trainprof.report.html.notebook import html_of, short_of

    return html_of, short_of


use_notebook_renderer(_notebook_renderer)
