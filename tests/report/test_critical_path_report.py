"""The critical path in the text, JSON and HTML reports and on the annotated timeline."""

from __future__ import annotations

import gzip
import io
import json

from rich.console import Console

from trainprof.commands.annotate import annotate
from trainprof.pipeline import analyze
from trainprof.report.html.report import render_html
from trainprof.report.sections import critical_path
from trainprof.report.sections.view import ViewContext

HOSTILE = "<script>alert(1)</script>"


def _gpu_bound(builder, tmp_path, kernel="gemm"):
    builder.step(1, 0, 1000)
    builder.op("aten::mm", 0, 100)
    for i in range(5):
        builder.launch(10 + 10 * i, 5, name=kernel, k_ts=20 + 150 * i, k_dur=150)
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 110, 662)
    return builder.write(tmp_path / "t.json")


def test_text_shows_the_split_and_the_what_ifs(builder, tmp_path):
    analysis = analyze(_gpu_bound(builder, tmp_path), workers=1)
    section = analysis.ranks[0].sections.critical_path
    console = Console(file=io.StringIO(), width=120)
    console.print(critical_path.text(section, ViewContext()))
    out = console.file.getvalue()
    assert "Critical path" in out
    assert "GPU compute" in out and "75.0%" in out  # 750 of 1000 µs
    assert "kernel: gemm" in out and "0.34" in out  # the step at zero GEMM time: 0.338 ms


def test_json_section(builder, tmp_path):
    data = analyze(_gpu_bound(builder, tmp_path), workers=1).to_dict()
    cp = data["ranks"][0]["critical_path"]
    assert cp["split_us"]["gpu_compute"] == 750
    assert abs(sum(cp["split_pct"].values()) - 100) < 1e-9
    gemm = next(i for i in cp["items"] if i["name"] == "gemm")
    assert gemm["step_ms_if_half"] == 0.625
    assert cp["steps"][0]["pieces"][0]["lane"].startswith("host thread")
    json.dumps(data)  # plain values only


def test_html_draws_the_path_and_escapes_names(builder, tmp_path):
    html = render_html(analyze(_gpu_bound(builder, tmp_path, kernel=HOSTILE), workers=1))
    assert "Critical path of step 1" in html
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_annotate_marks_the_path_where_the_work_ran(builder, tmp_path):
    src = _gpu_bound(builder, tmp_path)
    kernel_ts = sorted(e["ts"] for e in builder.events if e["cat"] == "kernel")
    out = annotate(src, tmp_path / "out.json.gz").path
    with gzip.open(out) as f:
        events = json.load(f)["traceEvents"]
    path = [e for e in events if e.get("cat") == "trainprof" and e.get("ph") == "X"]
    gpu = sorted(e["ts"] for e in path if e["name"] == "gemm")
    # The five GEMMs ran back to back: one merged stretch from the first one's start.
    assert gpu == [kernel_ts[0]]
    assert next(e for e in path if e["name"] == "gemm")["dur"] == 750
    assert {e["tid"] for e in path} == {"critical path (thread 100)", "critical path (stream 7)"}
