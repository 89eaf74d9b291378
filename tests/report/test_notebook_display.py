"""Result objects in a notebook: escaped HTML sections, one-line reprs, and to_pandas()."""

from __future__ import annotations

import html as html_lib
import json

import pytest
from markupsafe import escape
from report_helpers import IMG_PAYLOAD, SCRIPT_PAYLOAD, hostile_trace

import trainprof
from trainprof.commands.compare import compare
from trainprof.report.json import to_json_bytes

from helpers.paths import RESNET_W0, RESNET_W4, TRACE_FILTER

pd = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def folder_analysis():
    return trainprof.analyze(TRACE_FILTER)


def test_trace_strings_are_escaped_in_every_notebook_view(tmp_path):
    analysis = trainprof.analyze(hostile_trace(tmp_path))
    views = [analysis._repr_html_(), analysis.ranks[0]._repr_html_(),
             analysis.findings._repr_html_()]
    for view in views:
        assert "<img" not in view and "<script>window" not in view
    page = views[0]
    assert str(escape(IMG_PAYLOAD)) in page  # the device, as text
    srcdoc = page[page.index('srcdoc="') + 8:]
    srcdoc = html_lib.unescape(srcdoc[:srcdoc.index('"')])
    assert srcdoc.startswith("<!DOCTYPE html>") and SCRIPT_PAYLOAD not in srcdoc


def test_the_analysis_view_lists_every_finding_and_rank(folder_analysis):
    page = folder_analysis._repr_html_()
    result = json.loads(to_json_bytes(folder_analysis))
    table = page[page.index('class="trainprof-findings"'):page.index("</table>")]
    assert table.count("<tr>") == len(result["findings"]) + 1  # the header row
    for f in result["findings"]:
        assert f"<td>{f['id']}</td>" in table
    ranks = page[page.index('class="trainprof-ranks"'):]
    assert all(f'<td class="n">{r["rank"]}</td>' in ranks for r in result["ranks"])


def test_reprs_are_one_short_line_with_the_headline_figures(folder_analysis):
    result = json.loads(to_json_bytes(folder_analysis))
    comparison = compare(RESNET_W0, RESNET_W4)
    objects = [folder_analysis, folder_analysis.ranks[1], folder_analysis.findings,
               folder_analysis.findings[0], comparison]
    for obj in objects:
        text = repr(obj)
        assert "\n" not in text and len(text) < 400, text
    median = max(r["steps"]["median_ms"] for r in result["ranks"])
    assert f"median step {median:,.1f} ms" in repr(folder_analysis)
    assert repr(folder_analysis.findings).startswith(f"<{len(result['findings'])} findings: "
                                                     f"{result['findings'][0]['id']} (")
    assert f"{comparison.base.median_ms:,.2f} -> {comparison.new.median_ms:,.2f} ms" in \
        repr(comparison)
    assert "median step ms" in comparison._repr_html_()


def test_every_section_has_a_working_to_pandas(folder_analysis):
    result = json.loads(to_json_bytes(folder_analysis))
    rank, rank_json = folder_analysis.ranks[0], result["ranks"][0]
    expected_rows = {
        "kernels": len(rank_json["kernels"]["rows"]),
        "operators": len(rank_json["operators"]["rows"]),
        "communication": len(rank_json["communication"]["types"]),
        "launch": len(rank_json["launch"]["apis"]),
        "host": len(rank_json["host"]["ms_per_step"]),
        "memory": len(rank_json["memory"]["devices"]),
    }
    for name, section in rank.sections.items():
        frame = section.to_pandas()
        assert isinstance(frame, pd.DataFrame), name
        if name in expected_rows:
            assert len(frame) == expected_rows[name], name
    for name, section in folder_analysis.job.items():
        assert isinstance(section.to_pandas(), pd.DataFrame), name
    assert len(folder_analysis.job.rank_table.to_pandas()) == 2
    frame = folder_analysis.to_pandas()
    # The JSON result is written to 12 significant digits (trainprof/tidy.py).
    assert frame["median_ms"].tolist() == pytest.approx(
        [r["steps"]["median_ms"] for r in result["ranks"]], rel=1e-11)
    steps = rank.to_pandas()
    assert steps["ms"].tolist() == pytest.approx(
        [s["ms"] for s in rank_json["steps"]["per_step"]], rel=1e-11)
    findings = folder_analysis.findings.to_pandas()
    assert findings["id"].tolist() == [f["id"] for f in result["findings"]]
