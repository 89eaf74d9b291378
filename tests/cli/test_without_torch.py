"""Analysing a trace needs no torch: the analysis commands run with torch made unimportable."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.paths import RESNET_W0, ROOT, TRACE_FILTER

# Runs the CLI in a fresh interpreter where `import torch` fails, as on a machine without it.
_NO_TORCH = (
    "import sys; sys.modules['torch'] = None; "
    "from trainprof.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run_without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NO_TORCH, *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_analyze_report_and_compare_need_no_torch(tmp_path):
    out = tmp_path / "result.json"
    proc = run_without_torch("analyze", str(RESNET_W0), "--format", "json", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["findings"][0]["id"] == "data_loading"

    html = tmp_path / "report.html"
    proc = run_without_torch("report", str(TRACE_FILTER), "-o", str(html), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "<svg" in html.read_text()

    proc = run_without_torch("compare", str(out), str(RESNET_W0), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "base" in json.loads(proc.stdout)


def test_recording_without_torch_says_so_in_one_line():
    proc = run_without_torch("run", "--", "train.py")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "PyTorch" in proc.stderr
