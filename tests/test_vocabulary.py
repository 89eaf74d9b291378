"""One vocabulary: the names and colours every layer uses come from trainprof.vocabulary, so
no layer can spell a phase, a severity or a backend its own way."""

from __future__ import annotations

import re

from trainprof import vocabulary
from trainprof.analysis.overview import breakdown, phases
from trainprof.bench import health
from trainprof.capture import live, step_times
from trainprof.diagnose import findings
from trainprof.report import labels
from trainprof.report.terminal import report as text
from trainprof.report.terminal import snapshot

from helpers.paths import ROOT


def test_every_layer_uses_the_one_list_of_phases_and_categories():
    assert phases.PHASES is step_times.PHASES is vocabulary.PHASES
    assert vocabulary.PHASES[:4] == health.PHASES and "other" not in health.PHASES
    assert breakdown.ALL_CATEGORIES is vocabulary.ALL_CATEGORIES
    assert set(labels.CATEGORY_COLORS) == set(vocabulary.ALL_CATEGORIES)
    assert set(labels.PHASE_COLORS) == set(live.PHASE_COLORS) == set(vocabulary.PHASES)


def test_severities_are_styled_alike_in_every_view():
    assert text._SEVERITY_STYLE == snapshot._SEVERITY_STYLE == vocabulary.SEVERITY_STYLES
    assert list(findings.SEVERITY_ORDER) == ["high", "medium", "low"]
    css = (ROOT / "src/trainprof/report/templates/report.css").read_text()
    for severity, color in vocabulary.SEVERITY_COLORS.items():
        assert re.search(rf"--{severity}:\s*{color}\b", css), severity
    source = (ROOT / "src/trainprof/capture/live.py").read_text()
    assert '"bold red"' not in source  # the live view's finding uses the shared styles


def test_no_module_keeps_its_own_copy_of_the_words():
    """A tuple of the five phases, or of the severity styles, written anywhere but the
    vocabulary is a second definition waiting to drift."""
    phases_literal = re.compile(r'\(\s*"data",\s*"forward",\s*"backward",\s*"optimizer"')
    styles_literal = re.compile(r'"high":\s*"bold red"')
    for path in (ROOT / "src/trainprof").rglob("*.py"):
        if path.name == "vocabulary.py":
            continue
        source = path.read_text()
        assert not phases_literal.search(source), path
        assert not styles_literal.search(source), path


def test_a_missing_number_reads_the_same_in_every_view():
    from trainprof import formatting
    from trainprof.history.views import html as history_html
    from trainprof.report import compare as compare_render
    from trainprof.report.html import tables as html_tables
    from trainprof.report.markdown import report as markdown
    from trainprof.report.terminal import report as text_report

    views = [formatting.number, history_html._fmt, html_tables.fmt, markdown._f,
             compare_render._f, lambda v: text_report._fmt(v, "")]
    assert {view(None) for view in views} == {"n/a"}
    assert {view(1234.56) for view in views if view is not views[-1]} == {"1,234.6"}
    assert compare_render._pct(None) == "n/a" and compare_render._pct(3.14) == "+3.1%"


def test_one_list_of_backends_decides_collective_and_communication():
    """hccl: (Ascend) counted as a collective but not as communication, once: every backend of
    the list is both."""
    from trainprof.trace import model

    for backend in vocabulary.COMM_BACKENDS:
        name = f"{backend}:all_reduce"
        assert model.is_backend_collective(model.Kind.CPU_OP, name), name
        assert model._COMM_HOST.match(name), name
    assert not model._COMM_HOST.match("aten::all_reduce_ish")
