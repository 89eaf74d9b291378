"""The deep analyses that run after the overview, each adding one section to a rank's result.

A section is a function ``(trace, steps) -> result`` whose result has ``to_dict()``. Its name is
the key under ``ranks[i]`` in the JSON result and in ``RankAnalysis.sections``. To add one, write
its module and list it here; the report side lists its renderer in ``report/sections.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import Trace

Section = Callable[[Trace, StepWindows], Any]

#: (name, function), in the order they run and are shown.
SECTIONS: list[tuple[str, Section]] = []


def run_sections(trace: Trace, steps: StepWindows) -> dict[str, Any]:
    """Every registered section's result for one trace."""
    return {name: fn(trace, steps) for name, fn in SECTIONS}
