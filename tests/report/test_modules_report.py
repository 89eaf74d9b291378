"""`trainprof analyze --modules` in text, Markdown, HTML and JSON, with escaping of module
names taken from the trace."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.module_workload import HOSTILE, synthetic_gpu_modules
from helpers.paths import BERT, GPU_METRICS, ROOT


def run(*args: str):
    return subprocess.run([sys.executable, "-m", "trainprof", "analyze", "--no-progress", *args],
                          capture_output=True, text=True, cwd=ROOT,
                          env={"COLUMNS": "100", "PATH": "", "PYTHONPATH": str(ROOT / "src")})


def test_text_tree_only_with_the_flag(builder, tmp_path):
    synthetic_gpu_modules(builder)
    path = str(builder.write(tmp_path / "t.json"))
    shown = run(path, "--modules")
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if "Outer_0" in line or "Inner_0" in line]
    # Outer: 100 µs forward and 150 µs backward kernel time = 25% of the 1 ms step.
    assert "0.10" in lines[0] and "0.15" in lines[0] and "25.0%" in lines[0]
    assert lines[1].index("Inner_0") > lines[0].index("Outer_0")  # indented under Outer
    assert "23.0%" in lines[1]
    plain = run(path)
    # Without the flag, no module tree (the critical path may still name a module's own Python
    # time as an item on the path).
    assert plain.returncode == 0 and "Modules by" not in plain.stdout
    assert not any("Inner_0" in line and "23.0%" in line for line in plain.stdout.splitlines())


def test_without_module_events_one_sentence(tmp_path):
    proc = run(str(GPU_METRICS), "--modules")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "no nn.Module events" in text and "with_stack=True" in text
    md = run(str(GPU_METRICS), "--modules", "--format", "md")
    assert "### Time per module" in md.stdout and "with\\_stack=True" in md.stdout
    assert "| module |" not in md.stdout


def test_json_rows(builder, tmp_path):
    synthetic_gpu_modules(builder)
    proc = run(str(builder.write(tmp_path / "t.json")), "--format", "json")
    modules = json.loads(proc.stdout)["ranks"][0]["modules"]
    assert modules["available"] and modules["clock"] == "device"
    assert [(r["path"], r["parent"], r["backward_device_total_us"]) for r in modules["rows"]] == [
        ("Outer_0", -1, 150.0), ("Outer_0/Inner_0", 0, 150.0)]


def test_markdown_and_html_escape_module_names(builder, tmp_path):
    synthetic_gpu_modules(builder, inner=HOSTILE)
    path = str(builder.write(tmp_path / "t.json"))
    md = run(path, "--modules", "--format", "md").stdout
    row = next(line for line in md.splitlines() if "Inner" in line)
    assert "<b>" not in md and "&lt;b&gt;Inner\\|\\*&lt;/b&gt;\\_0" in row
    # One level deep, and the | in the name is no column: seven cells.
    assert row.startswith("| · &lt;") and row.count(" | ") == 6
    html = run(path, "--format", "html").stdout
    assert "<b>Inner" not in html and "&lt;b&gt;Inner|*&lt;/b&gt;_0</span>" in html
    # Inner nests in Outer's <details>, its path (in the tooltip) escaped too.
    assert ('<details class="module" open><summary title="Outer_0">' in html)
    inner = html.index('<div class="module leaf" title="Outer_0/&lt;b&gt;Inner|*&lt;/b&gt;_0">')
    assert html.index('<summary title="Outer_0">') < inner < html.index("</details>", inner)


def test_small_modules_are_counted_not_listed():
    """BERT-small on an H100: modules under 1% of the step are left out of the text tree and
    counted; the JSON result keeps them all."""
    rows = json.loads(run(str(BERT), "--format", "json").stdout)["ranks"][0]["modules"]["rows"]
    small = [r for r in rows if r["share_pct"] < 1.0]
    assert 0 < len(small) < len(rows)
    text = " ".join(run(str(BERT), "--modules").stdout.split())
    assert f"{len(small)} smaller modules (under 1% of the step each) not shown" in text
    assert "BertLMHeadModel_0" in text and small[-1]["name"] + " " not in text
