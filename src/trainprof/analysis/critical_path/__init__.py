"""The critical path of each step: the chain of work that sets the step time, where its time
goes, and what the step would take if one item on it were faster (docs/critical_path.md).

The names below are served on first use (trainprof/lazy.py): importing one of this package's
modules does not import the others."""

from trainprof.lazy import lazy_names

_WHERE = {name: "trainprof.analysis.critical_path.result"
          for name in ("CriticalPath", "PathItem", "PathPiece", "PathPieces", "StepPath")}
_WHERE["critical_path"] = "trainprof.analysis.critical_path.windowed"
__getattr__ = lazy_names(__name__, _WHERE)
__all__ = sorted(_WHERE)
