"""`trainprof demo`: its recorded run is diagnosed as data-bound, first."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import trainprof
from trainprof.demo import record_demo
from trainprof.report.text import findings_panel


@pytest.mark.slow
def test_demo_findings_put_data_loading_first(tmp_path):
    analysis = trainprof.analyze(record_demo(tmp_path, steps=8))
    top = analysis.findings[0]
    assert top.id == "data_loading" and top.severity == "high", [
        (f.id, f.saving_pct) for f in analysis.findings]
    console = Console(record=True, width=100, file=io.StringIO())
    console.print(findings_panel(analysis))
    text = console.export_text()
    assert text.index("Waiting for data") < text.index("Fix:")
