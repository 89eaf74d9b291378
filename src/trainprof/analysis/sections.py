"""The deep analyses that run after the overview, each adding one section to a rank's result.

A section is a function ``(trace, steps) -> result`` whose result has ``to_dict()``. Its name is
the key under ``ranks[i]`` in the JSON result and in ``RankAnalysis.sections``. To add one, write
its module and list it here; the report side lists its renderer in ``report/sections.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainprof.analysis.steps import StepWindows

if TYPE_CHECKING:
    from trainprof.analysis.overview import RankAnalysis
from trainprof.trace.model import Trace

Section = Callable[[Trace, StepWindows], Any]

#: (name, function), in the order they run and are shown.
SECTIONS: list[tuple[str, Section]] = []


def run_sections(trace: Trace, steps: StepWindows) -> dict[str, Any]:
    """Every registered section's result for one trace."""
    return {name: fn(trace, steps) for name, fn in SECTIONS}


JobSection = Callable[[list["RankAnalysis"]], Any]

#: Job-level sections computed from every rank's result (e.g. stragglers), shown once. Their
#: results go under the top-level "job" key of the JSON result.
JOB_SECTIONS: list[tuple[str, JobSection]] = []


def run_job_sections(ranks: list[RankAnalysis]) -> dict[str, Any]:
    return {name: fn(ranks) for name, fn in JOB_SECTIONS}
