"""The critical path of each step: the chain of work that sets the step time, where its time
goes, and what the step would take if one item on it were faster (docs/critical_path.md)."""

from trainprof.analysis.critical_path.result import (
    CriticalPath,
    PathItem,
    PathPiece,
    PathPieces,
    StepPath,
)
from trainprof.analysis.critical_path.windowed import critical_path

__all__ = ["CriticalPath", "PathItem", "PathPiece", "PathPieces", "StepPath", "critical_path"]
