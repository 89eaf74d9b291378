"""Markdown for pull-request comments: the findings table, the overview, and escaping."""

from __future__ import annotations

import html
import re

import pytest
from report_helpers import IMG_PAYLOAD, PIPE_PAYLOAD, SCRIPT_PAYLOAD, hostile_trace, result_of

from trainprof.commands.report import report_result
from trainprof.report.markdown.report import code_block, md_text, to_markdown

from helpers.paths import RESNET_W0, TRACE_FILTER


def table_rows(md: str, header_start: str) -> list[list[str]]:
    """The cells of the table whose header row starts with ``header_start``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_resnet_comment_has_findings_overview_and_top_ops():
    md = to_markdown(result_of(RESNET_W0))
    findings = table_rows(md, "| # | severity | finding")
    assert findings[0][:4] == ["1", "high", "Waiting for data takes 33% of each step", "rank 0"]
    assert findings[0][4].startswith("33%")
    assert "<details><summary>Evidence and fixes</summary>" in md
    assert "num_workers=4" in md  # the fix snippet, in a code block
    breakdown = {r[0]: r for r in table_rows(md, "| category | ms/step | share")}
    assert breakdown["DataLoader"][2] == "33.4%"
    ops = table_rows(md, "| operator | calls")
    assert ops[0][0] == r"aten::cudnn\_convolution\_backward\_weight" and len(ops) == 10
    assert "**Top kernels**" in md


def test_multi_rank_comment_describes_the_slowest_rank():
    md = to_markdown(result_of(TRACE_FILTER))
    assert "### Overview: rank 1 (slowest of 2)" in md


def test_trace_strings_cannot_break_the_markdown(tmp_path):
    md = to_markdown(report_result(hostile_trace(tmp_path)))
    for payload in (IMG_PAYLOAD, SCRIPT_PAYLOAD, PIPE_PAYLOAD, "<img", "<script"):
        assert payload not in md
    ops = table_rows(md, "| operator | calls")
    assert all(len(row) == 4 for row in ops)  # no pipe in a name splits a cell
    assert r"a\|b\`c\`\*d\*\_e\_\[f\](javascript:g)" in md


def test_md_text_and_code_block():
    assert md_text("x|y <b> & `z`\nnext") == r"x\|y &lt;b&gt; &amp; \`z\` next"
    assert md_text("k" * 200).endswith("…") and len(md_text("k" * 200)) == 90
    block = code_block("a = '```'\n")
    assert block.startswith("````python\n") and block.endswith("\n````")


def test_findings_table_ends_before_the_details_block():
    md = to_markdown(result_of(RESNET_W0))
    lines = md.splitlines()
    details = lines.index("<details><summary>Evidence and fixes</summary>")
    assert lines[details - 1] == "" and lines[details - 2].startswith("| 4 |")


def test_kernel_names_lose_their_parameter_lists():
    md = to_markdown(result_of(RESNET_W0))
    kernels = table_rows(md, "| kernel | calls")
    assert kernels[0][0] == r"cudnn::detail::dgrad\_engine&lt;float, 512, 6, 5, 3, 3, 3, false&gt;"
    assert not any(row[0].startswith("void ") for row in kernels)


def gfm(md: str) -> str:
    """The HTML GitHub makes of ``md`` (cmark-gfm, its own renderer; raw HTML allowed, as in a
    pull-request comment's <details>)."""
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)


def test_github_renders_every_table_whole_and_names_as_text(tmp_path):
    md = to_markdown(report_result(hostile_trace(tmp_path)))
    page = gfm(md)
    tables = re.findall(r"<table>(.*?)</table>", page, re.S)
    assert len(tables) == md.count("\n| --- ") + md.count("\n| ---: ")  # every table parsed
    for t in tables:
        head, body = t.split("</thead>")
        width = len(re.findall(r"<th[ >]", head))
        assert all(len(re.findall(r"<td[ >]", row)) == width
                   for row in re.findall(r"<tr>(.*?)</tr>", body, re.S))
    cells = [html.unescape(re.sub(r"<[^>]+>", "", c))
             for c in re.findall(r"<td[^>]*>(.*?)</td>", page, re.S)]
    for payload in (IMG_PAYLOAD, SCRIPT_PAYLOAD, PIPE_PAYLOAD):
        assert payload in cells  # shown as the very text, in one cell
    assert "<img" not in page and "<script" not in page and "<a " not in page
    assert "<details><summary>Evidence and fixes</summary>" in page


def test_the_critical_path_and_per_rank_bus_bandwidth_are_in_markdown():
    """The path's split (adding up to the step) and the what-if table; each rank's bus bandwidth
    slowest link first."""
    from trainprof.analysis.job.collective_ranks import CollectiveRanks, RankBandwidth
    from trainprof.report.sections.collective_ranks import markdown
    from trainprof.report.sections.view import ViewContext

    def collective_ranks_md(ranks):
        return markdown(ranks, ViewContext())

    md = to_markdown(result_of(RESNET_W0))
    section = md[md.index("### What sets the step time"):]
    section = section[:section.index("\n### ")] if "\n### " in section else section
    shares = [float(x) for x in re.findall(r"\| ([\d.]+)% \|\n", section.split("| item |")[0])]
    assert shares and abs(sum(shares) - 100) < 0.5
    assert "| item | % of path | step ms if 0 | if half | saves ≤ |" in section
    rows = [{"rank": 0, "window": 0, "calls": 4, "time_us": 2000.0, "busbw_gb_s": 80.0,
             "pct_of_peak": 40.0},
            {"rank": 1, "window": 0, "calls": 4, "time_us": 8000.0, "busbw_gb_s": 20.0,
             "pct_of_peak": 10.0}]
    table = collective_ranks_md(CollectiveRanks([RankBandwidth(**r) for r in rows]))
    lines = table.splitlines()
    assert lines[2] == "| 1 | 4 | 8.00 | 20.0 | 10.0% |" and lines[3].startswith("| 0 |")
    assert collective_ranks_md(CollectiveRanks([RankBandwidth(**rows[0])])) == ""
