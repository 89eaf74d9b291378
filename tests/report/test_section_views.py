"""The section views' registry (report/sections/registry.py): one view per section, and the
reports show the sections in its order, each under its own heading."""

from __future__ import annotations

import io
import re

import msgspec
import pytest
from rich.console import Console

import trainprof
from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.report.html.report import render_html
from trainprof.report.markdown.report import to_markdown
from trainprof.report.sections.registry import MARKDOWN_OUTLINE, VIEWS, check_views
from trainprof.report.sections.view import SectionView, ViewContext
from trainprof.report.terminal.report import print_analysis

from helpers.paths import BERT, NCCL_TRACE, RESNET_W0


def test_every_section_has_one_view_of_its_level():
    assert {v.name for v in VIEWS if v.level == "rank"} == set(RankSections.field_names())
    assert {v.name for v in VIEWS if v.level == "job"} == set(JobSections.field_names())
    check_views(VIEWS)
    with pytest.raises(RuntimeError, match="differ"):
        check_views([v for v in VIEWS if v.name != "roofline"])
    with pytest.raises(RuntimeError, match="differ"):
        check_views([*VIEWS, SectionView("roofline")])
    with pytest.raises(RuntimeError, match="MARKDOWN_OUTLINE"):
        check_views([msgspec.structs.replace(v, markdown_heading="Elsewhere")
                     if v.name == "kernels" else v for v in VIEWS])


@pytest.mark.parametrize("path", [BERT, NCCL_TRACE, RESNET_W0], ids=lambda p: p.name[:24])
def test_the_page_shows_each_sections_blocks_in_the_registrys_order(path):
    """The headings each view gives for the rank's sections appear on the page, in VIEWS'
    order; what a view returns is what the page shows."""
    analysis = trainprof.analyze(path)
    rank = analysis.ranks[0]
    context = ViewContext(rank=rank, analysis=analysis, rows=25)
    headings = [b.heading for v in VIEWS if v.level == "rank" and v.html is not None
                for b in v.html(getattr(rank.sections, v.name), context) if b.heading]
    assert len(headings) >= 4
    page = render_html(analysis)
    shown = [re.sub("&#39;", "'", h) for h in re.findall(r"<h3>([^<]*)</h3>", page)]
    positions = [shown.index(h) for h in headings]
    assert positions == sorted(positions)


def test_the_comment_follows_the_outline():
    analysis = trainprof.analyze(RESNET_W0)
    md = to_markdown(analysis)
    found = [h for h in re.findall(r"^### (.*)$", md, flags=re.M) if h in MARKDOWN_OUTLINE]
    assert found == [h for h in MARKDOWN_OUTLINE if h in found]
    assert "Where the time goes: top ops" in found and "How far from the hardware" in found


def test_the_text_report_prints_what_each_view_renders():
    """Every rank view's text rendering is in the text report: the first line each prints on
    its own (at the width of the rank's panel) is in the report."""
    analysis = trainprof.analyze(BERT)
    console = Console(record=True, width=200, file=io.StringIO())
    print_analysis(analysis, console)
    report = console.export_text()
    rank = analysis.ranks[0]
    checked = []
    for view in VIEWS:
        result = getattr(rank.sections, view.name) if view.level == "rank" else None
        shown = view.text(result, ViewContext(rank=rank, analysis=analysis)) \
            if view.text is not None and result is not None else None
        if shown is None:
            continue
        alone = Console(record=True, width=196, file=io.StringIO())  # inside the panel
        alone.print(shown)
        first = next(line.strip() for line in alone.export_text().splitlines() if line.strip())
        assert first[:40] in report, (view.name, first)
        checked.append(view.name)
    assert len(checked) >= 6, checked
