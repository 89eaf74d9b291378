"""`trainprof analyze`: text by default, JSON that meets the schema, atomic output files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.paths import ROOT, SHARED, TRACE_FILTER

CHECKER = SHARED.parent / "tools" / "check_analysis_json.py"
W0 = SHARED / "kineto/tb_plugin/samples/resnet50_num_workers_0"


def run(*args: str):
    return subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True,
                          text=True, cwd=ROOT)


def check_schema(path) -> None:
    proc = subprocess.run([sys.executable, str(CHECKER), str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout


def test_json_file_meets_the_schema(tmp_path):
    out = tmp_path / "result.json"
    proc = run("analyze", str(W0), "--format", "json", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    # No progress bar, no chatter in JSON mode: only the one line that says where it went.
    assert proc.stdout == "" and proc.stderr == f"trainprof: wrote {out}\n"
    check_schema(out)
    data = json.loads(out.read_text())
    assert data["schema"] == "trainprof.analysis/1"
    assert [(r["rank"], r["window"]) for r in data["ranks"]] == [(0, 0), (0, 1)]
    first = data["ranks"][0]
    assert first["breakdown_pct"]["dataloader"] == pytest.approx(33.4, abs=1)
    assert first["steps"]["count"] == 6
    assert [s["step"] for s in first["steps"]["per_step"]] == [5, 6, 7, 8, 9, 10]
    assert first["gpu"]["utilization_pct"] == pytest.approx(55.5, abs=1)
    assert data["findings"][0]["id"] == "data_loading"  # a third of the step in the loader
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left behind


def test_json_to_stdout_for_a_cpu_trace(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.op("aten::add", 0, 60)
    path = builder.write(tmp_path / "cpu.json")
    proc = run("analyze", str(path), "--format", "json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["ranks"][0]["gpu"] is None and data["ranks"][0]["timeline"] is None
    (tmp_path / "r.json").write_text(proc.stdout)
    check_schema(tmp_path / "r.json")


def test_text_report_shows_the_overview():
    proc = run("analyze", str(TRACE_FILTER))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "2 ranks" in out and "slowest" in out
    assert "Where the step time goes" in out and "Communication" in out
    assert "GPU timeline" in out


def test_text_report_to_a_file(tmp_path):
    out = tmp_path / "report.txt"
    proc = run("analyze", str(W0 / "worker0.1623143089861.pt.trace.json.gz"), "-o", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    text = out.read_text()
    assert "DataLoader" in text and "33.4%" in text


def test_version_and_usage_errors():
    assert run("--version").stdout.startswith("trainprof ")
    proc = run("analyze")
    assert proc.returncode == 2 and "usage" in proc.stderr
