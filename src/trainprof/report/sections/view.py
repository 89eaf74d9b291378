"""The protocol a section's renderers follow: one ``SectionView`` per analysis section, with its
text, HTML and Markdown renderers side by side.

The three reports take their sections from ``report/sections/registry.py``: the text report
prints each section's ``text`` in the order the analysis computed them, the HTML page puts each
section's ``html`` blocks in the registry's order, and the Markdown comment gathers the
``markdown`` pieces under their ``markdown_heading`` (pieces with the same heading share it).
A renderer returns None, an empty list or "" when the section has nothing to show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from msgspec import field

from trainprof.analysis.options import DEFAULT_TOP

if TYPE_CHECKING:
    from trainprof.analysis.results import Analysis, RankAnalysis
    from trainprof.report.html.chart import Chart
    from trainprof.report.html.modules import ModulesView
    from trainprof.report.html.tables import Table


class ViewContext(msgspec.Struct, frozen=True):
    """What a renderer may read besides its section's result: the rank whose section it is
    (None for a job section), the analysis it belongs to (when the report has it) and the rows
    per table."""

    rank: RankAnalysis | None = None
    analysis: Analysis | None = None
    rows: int = DEFAULT_TOP
    #: Whether the module tree is shown in the text and Markdown reports (``--modules``).
    modules: bool = False
    #: Every rank's row in the per-rank tables (``--all-ranks``).
    all_ranks: bool = False


class HtmlBlock(msgspec.Struct):
    """A part of the HTML page: a heading, then charts and tables in order (with ``beside``,
    the first chart beside the tables that follow), or the module tree."""

    heading: str | None = None
    parts: list[Chart | Table] = field(default_factory=list)
    beside: bool = False
    modules: ModulesView | None = None


TextRenderer = Callable[[Any, ViewContext], Any]
HtmlRenderer = Callable[[Any, ViewContext], list[HtmlBlock]]
MarkdownRenderer = Callable[[Any, ViewContext], str]


class SectionView(msgspec.Struct, frozen=True):
    """A section's renderers. ``name``: the section's key (a field of ``RankSections`` or,
    with ``level="job"``, of ``JobSections``)."""

    name: str
    level: Literal["rank", "job"] = "rank"
    text: TextRenderer | None = None
    html: HtmlRenderer | None = None
    markdown: MarkdownRenderer | None = None
    #: The Markdown heading (###) the piece goes under.
    markdown_heading: str | None = None
