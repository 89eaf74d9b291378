"""`trainprof report` and `trainprof analyze --format md` from the command line."""

from __future__ import annotations

import subprocess
import sys

from report_helpers import analysis_of

from trainprof.report.json import write_json

from helpers.paths import ALEXNET, RESNET_W4, ROOT


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_report_writes_one_html_file(tmp_path):
    out = tmp_path / "report.html"
    proc = run("report", str(RESNET_W4), "-o", str(out), "--top", "5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"Report written to {out}")
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Verdict" in html
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # atomic: no temp file left


def test_report_from_a_saved_result(tmp_path):
    saved = write_json(analysis_of(RESNET_W4), tmp_path / "result.json")
    proc = run("report", str(saved), "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert "not in a saved result" in (tmp_path / "r.html").read_text()


def test_report_of_a_missing_path_is_one_sentence(tmp_path):
    proc = run("report", str(tmp_path / "nothing.json"), "-o", str(tmp_path / "r.html"))
    assert proc.returncode == 2 and proc.stderr.startswith("trainprof: ")
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "r.html").exists()


def test_analyze_markdown_to_stdout_and_file(tmp_path):
    proc = run("analyze", str(ALEXNET), "--format", "md")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("## trainprof: ") and "### Findings" in proc.stdout
    assert "| # | severity | finding |" in proc.stdout
    out = tmp_path / "comment.md"
    assert run("analyze", str(ALEXNET), "--format", "md", "-o", str(out)).returncode == 0
    assert out.read_text() == proc.stdout
