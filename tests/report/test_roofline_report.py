"""The roofline and collectives in the text, Markdown and HTML reports."""

from __future__ import annotations

import io
import json
import math
import re

import pytest
from rich.console import Console

import trainprof
from trainprof.hardware.table import device_from_dict
from trainprof.report.html.report import render_html
from trainprof.report.json import to_json_bytes
from trainprof.report.markdown.report import to_markdown
from trainprof.report.sections import collectives, roofline
from trainprof.report.sections.view import ViewContext

from helpers.paths import BERT, NCCL_TRACE


def _text(renderable, width: int = 160) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def test_text_lists_classes_and_shapes_with_their_roofline():
    r = trainprof.analyze(BERT).ranks[0]
    text = _text(roofline.text(r.sections.roofline, ViewContext()))
    assert "H100 SXM (table)" in text
    gemm = next(line for line in text.splitlines() if line.lstrip().startswith("gemm"))
    assert gemm.split() == ["gemm", "bf16", "26", "0.20", "40.7", "0.39", "105", "memory",
                            "11.6%", "0.17"]
    assert "linear M=141 N=30522 K=512" in text and "106.9" in text


def test_text_at_80_columns_keeps_the_numbers_and_moves_the_rest_under_the_name():
    r = trainprof.analyze(BERT).ranks[0]
    lines = _text(roofline.text(r.sections.roofline, ViewContext()), 80).splitlines()
    assert max(len(line) for line in lines) <= 80
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("gemm"))
    assert lines[at].split() == ["gemm", "0.20", "40.7", "0.39", "11.6%", "0.17"]
    assert lines[at + 1].strip() == "bf16, 26 calls, memory-bound"


def test_text_collectives_show_busbw_against_the_link():
    r = trainprof.analyze(NCCL_TRACE).ranks[0]
    text = _text(collectives.text(r.sections.collectives, ViewContext()))
    first = next(line for line in text.splitlines() if "all_reduce" in line)
    assert "2.1" in first and "0.7% of 300" in first and "8.20 MB" in first


def test_markdown_has_the_hardware_section():
    md = to_markdown(trainprof.analyze(BERT))
    section = md.split("### How far from the hardware", 1)[1]
    assert "**Roofline** on H100 SXM" in section
    assert re.search(r"\| gemm \| bf16 \| 26 \| 0\.20 \| 40\.7 \| 0\.39 \| memory \| 11\.6% \|",
                     section)


def _svg_of(html: str) -> str:
    return html.split("<h3>How far from the hardware</h3>", 1)[1].split("</svg>", 1)[0]


def test_html_chart_has_one_point_per_shape_and_a_roof_per_ceiling():
    result = trainprof.analyze(BERT)
    shapes = result.ranks[0].sections.roofline.shapes
    svg = _svg_of(render_html(result))
    assert svg.count("<circle") == len(shapes)
    roofs = re.findall(r"<title>(\w+) roof: ([\d.]+) TFLOP/s", svg)
    assert roofs == [("fp32", "67"), ("bf16", "989.5")]  # vector ops, then the bf16 GEMMs
    # Log-log: x positions are linear in log10(intensity), inside the plot (58 to 748).
    points = [(float(x), r.intensity) for x, r in zip(
        re.findall(r'<circle cx="([\d.]+)"', svg), shapes, strict=True)]
    (xa, ia), (xb, ib) = min(points), max(points)
    per_decade = (xb - xa) / math.log10(ib / ia)
    for x, i in points:
        assert 58 <= x <= 748
        assert x == pytest.approx(xa + per_decade * math.log10(i / ia), abs=0.2)


def test_html_escapes_a_hostile_device_name(tmp_path):
    hostile = device_from_dict({"name": "<script>alert(1)</script>", "peak_tflops":
                                {"bf16": 500, "fp32": 50}, "hbm_tb_s": 2.0}, "test")
    result = trainprof.analyze(BERT, hardware=hostile)
    html = render_html(result)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    data = json.loads(to_json_bytes(result))
    assert data["ranks"][0]["roofline"]["device"]["name"] == "<script>alert(1)</script>"
