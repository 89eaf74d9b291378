"""The deep analyses that run after the overview, each adding one section to a rank's result.

A section is a function ``(trace, steps) -> result`` whose result has ``to_dict()``. Its name is
the key under ``ranks[i]`` in the JSON result and the attribute of ``RankAnalysis.sections``. To
add one, write its module, list it here and give it a typed field of the same name in
analysis/section_results.py (a mismatch fails at import); docs/contributing.md lists every file a
section touches, the renderers included. A section that depends on the analysis's options
(``AnalyzeOptions``) is built from them in ``sections_for``: no section reads options of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainprof.analysis.critical_path.windowed import critical_path
from trainprof.analysis.job.collective_ranks import collective_ranks
from trainprof.analysis.job.rank_table import mark_straggler, rank_table
from trainprof.analysis.job.stragglers import stragglers
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.parallelism.expert import expert_balance
from trainprof.analysis.parallelism.pipeline import pipeline_stages
from trainprof.analysis.parallelism.section import parallelism
from trainprof.analysis.parallelism.tensor import on_path
from trainprof.analysis.roofline.collectives import collectives, collectives_for
from trainprof.analysis.roofline.section import roofline, roofline_for
from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.analysis.sections.communication import communication
from trainprof.analysis.sections.compilation import compilation
from trainprof.analysis.sections.copies import copies
from trainprof.analysis.sections.host import host_time
from trainprof.analysis.sections.idle import idle_time
from trainprof.analysis.sections.kernels import kernel_stats
from trainprof.analysis.sections.launch import launch_stats
from trainprof.analysis.sections.memory import memory
from trainprof.analysis.sections.modules import module_tree
from trainprof.analysis.sections.operators import operators_for, operators_section
from trainprof.analysis.sections.syncs import sync_stats
from trainprof.analysis.streaming.windows import WindowedSection

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis
from trainprof.trace.model import Trace

#: A section: called on a whole trace, or window by window when the trace is streamed
#: (analysis/streaming/windows.py); every section streams.
Section = WindowedSection[Any, Any]

#: (name, section), in the order they run and are shown, with the default options.
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
# Which parallelism the job uses, and its figures (docs/parallelism.md).
SECTIONS += [("parallelism", parallelism)]


def sections_for(options: AnalyzeOptions | None = None) -> list[tuple[str, Section]]:
    """``SECTIONS`` as these options ask: the operator table grouped and sorted as asked, the
    roofline and the collectives against the device given (``hardware``); the registered
    sections themselves where the options are the defaults."""
    built: dict[str, Section] = {}
    if options is not None and (options.by_shape or options.sort_by is not None):
        built["operators"] = operators_for(options.by_shape, options.sort_by)
    if options is not None and options.hardware is not None:
        built.update(roofline=roofline_for(options.hardware),
                     collectives=collectives_for(options.hardware))
    return [(name, built.get(name, fn)) for name, fn in SECTIONS]


def run_sections(trace: Trace, steps: StepWindows,
                 options: AnalyzeOptions | None = None) -> RankSections:
    """Every registered section's result for one trace, with these options (None: defaults)."""
    return RankSections(**{name: fn(trace, steps) for name, fn in sections_for(options)})


def link_sections(sections: RankSections) -> None:
    """Fill the figures one section takes from another once all are done, however they were
    computed (in memory, by section workers, window by window): the tensor-parallel
    collectives' time on the critical path (analysis/parallelism/tensor.py)."""
    p = sections.parallelism
    if p is not None and p.tensor is not None:
        on_path(p.tensor, sections.critical_path)


JobSection = Callable[[list["RankAnalysis"]], Any]

#: Job-level sections computed from every rank's result (e.g. stragglers), shown once. Their
#: results go under the top-level "job" key of the JSON result.
JOB_SECTIONS: list[tuple[str, JobSection]] = []
JOB_SECTIONS += [("stragglers", stragglers)]
JOB_SECTIONS += [("rank_table", rank_table)]
JOB_SECTIONS += [("collective_ranks", collective_ranks)]
JOB_SECTIONS += [("pipeline", pipeline_stages)]
# Expert parallelism's all-to-all across ranks (docs/parallelism.md).
JOB_SECTIONS += [("experts", expert_balance)]


def run_job_sections(ranks: list[RankAnalysis]) -> JobSections:
    """Every job-level section's result for the ranks of one job."""
    out = JobSections(**{name: fn(ranks) for name, fn in JOB_SECTIONS})
    mark_straggler(out.rank_table, None if out.stragglers is None else out.stragglers.straggler)
    return out


def _check_fields(registry: list[tuple[str, Any]], container: type[RankSections | JobSections]
                  ) -> None:
    names = [name for name, _ in registry]
    if names != container.field_names():
        raise RuntimeError(f"the sections {names} and the fields of {container.__name__} "
                           f"{container.field_names()} differ: list a section with a field")


_check_fields(SECTIONS, RankSections)
for _name, _section in SECTIONS:
    if not isinstance(_section, WindowedSection):
        raise RuntimeError(f"the section {_name!r} does not stream: make it a WindowedSection "
                           "(analysis/streaming/windows.py)")
_check_fields(JOB_SECTIONS, JobSections)
