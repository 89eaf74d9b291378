"""Logging an analysis to trackers: summary metrics, step times, findings, report and result."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from trainprof.trackers.base import Guarded
from trainprof.trackers.metrics import (
    FINDING_COLUMNS,
    finding_rows,
    finding_tags,
    step_series,
    summary_metrics,
)


def log_analysis(analysis: Any, trackers: list[Guarded], artifacts: bool = True) -> None:
    """Everything trainprof knows about the run, to every tracker (docs/trackers.md)."""
    if not trackers:
        return
    series = step_series(analysis)
    summary = summary_metrics(analysis)
    rows, tags = finding_rows(analysis), finding_tags(analysis)
    with tempfile.TemporaryDirectory(prefix="trainprof-") as folder:
        files = _artifact_files(analysis, Path(folder)) if artifacts else []
        for tracker in trackers:
            tracker.log_series(series)
            tracker.log_metrics(summary, None)
            tracker.log_findings(FINDING_COLUMNS, rows, tags)
            for path in files:
                tracker.log_artifact(path)
            tracker.close()


def _artifact_files(analysis: Any, folder: Path) -> list[Path]:
    """The JSON result and the HTML report, written to ``folder``."""
    from trainprof.report.html.report import render_html
    from trainprof.report.json import write_json

    result = write_json(analysis, folder / "trainprof-analysis.json")
    report = folder / "trainprof-report.html"
    report.write_text(render_html(analysis, 25), encoding="utf-8")
    return [Path(result), report]
