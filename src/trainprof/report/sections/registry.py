"""Every section's view, in the order of the HTML page (rank sections, then job sections each in
their own part of it), and the outline of the Markdown comment.

Adding a section's view: its module in this package (a ``VIEW = SectionView(...)``) and its line
below; a section of the analysis (analysis/sections/registry.py) without a view, or a view
without a section, fails at import.
"""

from __future__ import annotations

from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.report.sections import (
    collective_ranks,
    collectives,
    communication,
    compilation,
    copies,
    critical_path,
    experts,
    host,
    idle,
    kernels,
    launch,
    memory,
    modules,
    operators,
    parallelism,
    pipeline,
    rank_table,
    roofline,
    stragglers,
    syncs,
)
from trainprof.report.sections.view import SectionView

VIEWS: list[SectionView] = [
    critical_path.VIEW, operators.VIEW, kernels.VIEW, modules.VIEW, idle.VIEW, memory.VIEW,
    communication.VIEW, roofline.VIEW, collectives.VIEW, parallelism.VIEW, copies.VIEW,
    launch.VIEW, syncs.VIEW, host.VIEW, compilation.VIEW,
    rank_table.VIEW, stragglers.VIEW, collective_ranks.VIEW, pipeline.VIEW, experts.VIEW,
]
BY_NAME: dict[str, SectionView] = {v.name: v for v in VIEWS}

#: The Markdown comment's parts after its overview, in order (``SectionView.markdown_heading``).
MARKDOWN_OUTLINE = (
    "Where the time goes: top ops", "Time per module",
    "What sets the step time: the critical path", "How far from the hardware", "Parallelism",
    "Collectives' bus bandwidth per rank",
)


def check_views(views: list[SectionView]) -> None:
    """Raise ``RuntimeError`` unless every section of the analysis has exactly one view, of its
    level, and every Markdown piece has a place in MARKDOWN_OUTLINE."""
    for level, container in (("rank", RankSections), ("job", JobSections)):
        names = [v.name for v in views if v.level == level]
        if sorted(names) != sorted(container.field_names()) or len(set(names)) != len(names):
            raise RuntimeError(f"the {level} views {sorted(names)} and the sections "
                               f"{sorted(container.field_names())} differ: give each section "
                               "one view (report/sections/registry.py)")
    for v in views:
        if v.markdown is not None and v.markdown_heading not in MARKDOWN_OUTLINE:
            raise RuntimeError(f"the view {v.name!r} has no place in MARKDOWN_OUTLINE")


check_views(VIEWS)
