"""The deep analyses that run after the overview, each adding one section to a rank's result.

A section is a function ``(trace, steps) -> result`` whose result has ``to_dict()``. Its name is
the key under ``ranks[i]`` in the JSON result and in ``RankAnalysis.sections``. To add one, write
its module and list it here; the report side lists its renderer in ``report/sections.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainprof.analysis.collective_bandwidth import collectives
from trainprof.analysis.collective_ranks import collective_ranks
from trainprof.analysis.communication import communication
from trainprof.analysis.compilation import compilation
from trainprof.analysis.copies import copies
from trainprof.analysis.critical_path import critical_path
from trainprof.analysis.host import host_time
from trainprof.analysis.idle import idle_time
from trainprof.analysis.kernels import kernel_stats
from trainprof.analysis.launch import launch_stats
from trainprof.analysis.memory import memory
from trainprof.analysis.modules import module_tree
from trainprof.analysis.operators import operators_section
from trainprof.analysis.rank_table import mark_straggler, rank_table
from trainprof.analysis.roofline import roofline
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.stragglers import stragglers
from trainprof.analysis.syncs import sync_stats

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis
from trainprof.trace.model import Trace

Section = Callable[[Trace, StepWindows], Any]

#: (name, function), in the order they run and are shown.
SECTIONS: list[tuple[str, Section]] = []
SECTIONS += [
    ("idle", idle_time),
    ("copies", copies),
    ("memory", memory),
    ("communication", communication),
]
SECTIONS += [
    ("operators", operators_section),
    ("kernels", kernel_stats),
    ("launch", launch_stats),
    ("syncs", sync_stats),
    ("host", host_time),
]
SECTIONS += [("modules", module_tree)]
# How far from the hardware (docs/roofline.md).
SECTIONS += [("roofline", roofline), ("collectives", collectives)]
SECTIONS += [("compilation", compilation)]
SECTIONS += [("critical_path", critical_path)]


def run_sections(trace: Trace, steps: StepWindows) -> dict[str, Any]:
    """Every registered section's result for one trace."""
    return {name: fn(trace, steps) for name, fn in SECTIONS}


JobSection = Callable[[list["RankAnalysis"]], Any]

#: Job-level sections computed from every rank's result (e.g. stragglers), shown once. Their
#: results go under the top-level "job" key of the JSON result.
JOB_SECTIONS: list[tuple[str, JobSection]] = []
JOB_SECTIONS += [("stragglers", stragglers)]
JOB_SECTIONS += [("rank_table", rank_table)]
JOB_SECTIONS += [("collective_ranks", collective_ranks)]


def run_job_sections(ranks: list[RankAnalysis]) -> dict[str, Any]:
    out = {name: fn(ranks) for name, fn in JOB_SECTIONS}
    straggler = getattr(out.get("stragglers"), "straggler", None)
    mark_straggler(out.get("rank_table"), straggler)
    return out
