"""The HTML report as a string: its sections, self-containment, size, and escaping."""

from __future__ import annotations

import json
import re

import pytest
from report_helpers import IMG_PAYLOAD, SCRIPT_PAYLOAD, hostile_trace, result_of

from trainprof.analysis.decode import analysis_from_dict
from trainprof.commands.report import report_result
from trainprof.report.html.report import json_for_script, render_html, write_html
from trainprof.report.json import write_json

from helpers.paths import (
    ALEXNET,
    BERT,
    BIG_TRACE,
    COMPILED,
    GPU_METRICS,
    NCCL_TRACE,
    NS_TRACE,
    PARAM,
    RESNET_W0,
    RESNET_W4,
    TIMESFORMER,
    TRACE_FILTER,
)
from helpers.tracegen import TraceBuilder

#: "A few MB at most for the shared traces."
MAX_BYTES = 3_000_000
ALL_SHARED = [RESNET_W0, RESNET_W4, NS_TRACE, NCCL_TRACE, TRACE_FILTER, BIG_TRACE, ALEXNET,
              TIMESFORMER, BERT, PARAM, COMPILED, GPU_METRICS]
#: Anything that would make a browser fetch: external scripts, styles, fonts, images, frames.
FETCHES = re.compile(r"<(?:link|img|iframe|object|embed)\b|\bsrc=|@import|url\(|@font-face",
                     re.IGNORECASE)


def section_order(html: str) -> list[str]:
    return re.findall(r'<section id="([\w-]+)"', html)


def test_resnet_report_opens_on_the_verdict():
    html = render_html(result_of(RESNET_W0))
    assert section_order(html)[:2] == ["verdict", "rank-0"]
    verdict = html[html.index('id="verdict"'):html.index('id="rank-0"')]
    assert "Waiting for data" in verdict and "num_workers=4" in verdict  # finding and its fix
    assert "DataLoader time with nothing else running: 33.4%" in verdict  # evidence
    # Charts: per-step stacked bars (6 steps x categories), shares, the memory curve and peak.
    assert html.count("<svg") >= 6
    steps = html[html.index("Step time, step by step"):html.index("Where the step time goes")]
    assert steps.count("<rect") >= 6 * 3 and "DataLoader" in steps
    assert "peak 2,792 MB in step 5" in html
    assert "Top operators" in html and "aten::cudnn_convolution_backward_weight" in html
    assert "Longest GPU idle gaps" in html and "Tesla V100-DGXS-32GB" in html
    assert "schema version" in html  # environment, from the trace's schemaVersion


def test_multi_rank_report_compares_ranks():
    html = render_html(result_of(TRACE_FILTER))
    assert section_order(html)[:3] == ["verdict", "ranks", "rank-0"]
    ranks = html[html.index('id="ranks"'):html.index('id="rank-0"')]
    assert "Mean step time per rank" in ranks and "Who waits for whom" in ranks
    assert "world size" in html and "128" in html


def test_every_shared_trace_gives_a_small_self_contained_page():
    sizes = {}
    for path in ALL_SHARED:
        html = render_html(result_of(path))
        sizes[path.name] = len(html.encode())
        assert html.startswith("<!DOCTYPE html>")
        assert not FETCHES.search(html), path.name
        assert "default-src 'none'" in html  # the CSP forbids every fetch, too
    assert max(sizes.values()) < MAX_BYTES, sizes


def test_saved_json_result_renders(tmp_path):
    saved = write_json(result_of(RESNET_W4), tmp_path / "result.json")
    html = render_html(report_result(saved))
    assert "Where the step time goes" in html and "<svg" in html


def test_cpu_trace_has_no_gpu_sections(tmp_path):
    b = TraceBuilder()
    for n in range(3):
        b.step(n, n * 100.0, 100)
        b.op("aten::add", n * 100.0 + 5, 60)
    html = render_html(report_result(b.write(tmp_path / "cpu.json")))
    assert "GPU timeline" not in html and "Top operators" in html


def test_trace_strings_are_escaped_everywhere(tmp_path):
    out = write_html(report_result(hostile_trace(tmp_path)), tmp_path / "report.html")
    html = out.read_text()
    for payload in (IMG_PAYLOAD, SCRIPT_PAYLOAD, "<img", "<script>window"):
        assert payload not in html
    assert html.count("<script") == 2  # the data block and our own script, nothing else
    assert html.count("&lt;img src=x onerror=") >= 4  # kernel table, title, source, device
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=2" in html  # the op name, as text
    data = html[html.index('id="trainprof-result">'):]
    data = data[data.index(">") + 1:data.index("</script>")]
    assert not re.search(r"[<>&]", data) and "\\u003cimg src=x" in data
    assert json.loads(data)["ranks"][0]["kernels"]["rows"][0]["name"] == IMG_PAYLOAD


@pytest.mark.parametrize("text", ["</script><script>alert(1)</script>", "<!--", "a\u2028b\u2029c",
                                  "&amp;", "'\""])
def test_json_for_script_round_trips_and_cannot_break_out(text):
    safe = str(json_for_script({"name": text}))
    assert not re.search(r"[<>&\u2028\u2029]", safe)
    assert json.loads(safe) == {"name": text}


def test_charts_escape_their_labels():
    from trainprof.report.html import svg

    chart = str(svg.stacked_bars([IMG_PAYLOAD], [svg.Series(SCRIPT_PAYLOAD, "#000")], [[1.0]],
                                 "ms", "<b>"))
    assert "<img" not in chart and "</script>" not in chart and "<b>" not in chart
    assert "&lt;img src=x" in chart


def test_many_ranks_show_the_slowest_in_full_and_stay_small(tmp_path):
    for rank in range(10):
        b = TraceBuilder()
        b.metadata["distributedInfo"] = {"rank": rank, "world_size": 10, "backend": "nccl"}
        for n in range(2):
            t = n * 2000.0
            b.step(n, t, 1000 + 100 * rank)
            b.launch(t + 10, 5, k_ts=t + 20, k_dur=500, name=f"gemm{rank}")
        b.write(tmp_path / f"rank{rank}.json")
    html = render_html(report_result(tmp_path))
    sections = section_order(html)
    assert sections[:2] == ["verdict", "ranks"] and len(sections) == 2 + 8 + 1
    assert "rank-0" not in sections and "rank-1" not in sections  # the two fastest
    assert "2 more ranks are in the table above only" in html
    data = html[html.index('id="trainprof-result">'):]
    data = json.loads(data[data.index(">") + 1:data.index("</script>")])
    assert data["trimmed_ranks"] == [0, 1] and "kernels" not in data["ranks"][0]
    assert "kernels" in data["ranks"][9] and len(data["ranks"]) == 10


def test_kernel_names_are_short_with_the_whole_name_in_a_tooltip(tmp_path):
    html = render_html(result_of(RESNET_W0))
    kernels = html[html.index("Top kernels"):html.index("Longest GPU idle gaps")]
    whole = ("void cudnn::detail::dgrad_engine&lt;float, 512, 6, 5, 3, 3, 3, false&gt;(int, int, "
             "int, float const*")
    assert f'title="{whole}' in kernels
    assert '">cudnn::detail::dgrad_engine&lt;float, 512, 6, 5, 3, 3, 3, false&gt;</td>' in kernels
    # A name built to break out of the tooltip attribute stays inside it.
    b = TraceBuilder()
    b.step(0, 0.0, 1000)
    b.launch(10, 5, name='k<int>(x" onmouseover="window.__pwned=3" y)', k_ts=20, k_dur=400)
    page = render_html(report_result(b.write(tmp_path / "t.json")))
    assert 'onmouseover="' not in page
    assert 'title="k&lt;int&gt;(x&#34; onmouseover=&#34;window.__pwned=3&#34; y)">k&lt;int&gt;</td>' \
        in page


def test_environment_shows_the_versions_the_trace_records():
    html = render_html(result_of(BERT))
    env = html[html.index('id="environment"'):]
    facts = {"CUDA runtime": "12.4", "CUDA driver": "12.9", "PyTorch": "not recorded in the trace"}
    for label, value in facts.items():
        assert f"<dt>{label}</dt><dd>{value}</dd>" in env
    assert "API version</dt><dd>22</dd>" in env  # CUPTI, the profiler's tracer


def test_tiny_memory_curves_get_a_unit_that_shows_them():
    html = render_html(result_of(BERT))
    assert "cpu: peak 16 bytes in aten::_flash_attention_forward" in html  # not "peak 0 MB"
    assert "cuda:0: peak 101 MB" in html


def test_rank_table_marks_the_slowest_fastest_and_straggler():
    from trainprof.report.html.view import ranks_table

    # rank 1 is the slower (619 against 615 ms)
    ranks = analysis_from_dict(result_of(TRACE_FILTER)).ranks
    marks = {row[0].text: row[-1].text for row in ranks_table(ranks).rows}
    assert marks == {"0": "fastest", "1": "slowest"}
    marks = {row[0].text: row[-1].text for row in ranks_table(ranks, straggler=0).rows}
    assert marks == {"0": "straggler, fastest", "1": "slowest"}
    html = render_html(result_of(TRACE_FILTER))
    assert '<td class="text">slowest</td></tr>' in html


def test_long_runs_get_a_bar_per_group_of_steps(tmp_path):
    from trainprof.report.html.view import MAX_STEP_BARS

    b = TraceBuilder()
    for n in range(400):
        b.step(n, n * 1000.0, 1000)
        b.launch(n * 1000.0 + 10, 5, k_ts=n * 1000.0 + 20, k_dur=100 if n < 200 else 500)
    html = render_html(report_result(b.write(tmp_path / "long.json")))
    chart = html[html.index("Step time, step by step"):html.index("Where the step time goes")]
    assert "Each bar is the mean of 3 consecutive steps (400 in all)." in chart
    bars = re.findall(r"<title>([\d–]+): Kernel ([\d.]+) ms</title>", chart)
    assert len(bars) == 134 <= MAX_STEP_BARS
    assert bars[0][0] == "0–2" and bars[-1][0] == "399"
    assert float(bars[0][1]) == pytest.approx(0.1, abs=0.01)  # the mean of steps 0-2
    assert float(bars[-1][1]) == pytest.approx(0.5, abs=0.01)


def test_windows_of_one_rank_are_told_apart_in_the_rank_chart():
    html = render_html(result_of(RESNET_W0.parent))  # two recordings of rank 0
    ranks = html[html.index('id="ranks"'):html.index('id="rank-0"')]
    assert ">0 w1</text>" in ranks and ">0.1</text>" not in ranks
    assert "w1, w2: the rank&#39;s second, third recorded window" in ranks


def test_findings_past_the_first_three_and_tiny_ones_are_folded():
    """The verdict opens the three costliest findings, unless one saves under 0.5% (and is not
    high): the others are folded to their title and saving, so the first chart is near the top."""
    result = result_of(TRACE_FILTER)
    html = render_html(result)
    verdict = html[html.index('id="verdict"'):html.index('id="ranks"')]
    articles = verdict.split('<article class="finding')[1:]
    assert len(articles) == len(result["findings"]) >= 2
    for number, (article, finding) in enumerate(zip(articles, result["findings"], strict=True), 1):
        should_open = number <= 3 and (finding["saving_pct"] >= 0.5 or finding["severity"] == "high")
        assert article.split(">", 2)[1].strip().startswith("<details" + " open" * should_open)
        if not should_open:
            assert not article.split(">", 2)[1].strip().startswith("<details open")
    assert any(f["saving_pct"] < 0.5 for f in result["findings"])  # the case is exercised


def test_each_finding_carries_its_rule_docs_section():
    """"docs/rules.md#x" is no dead reference: the section of docs/rules.md (threshold, how the
    saving is estimated) is inside the offline report, read from the same file as docs/."""
    from helpers.paths import ROOT

    result = result_of(RESNET_W0)
    html = render_html(result)
    anchor = result["findings"][0]["docs"].partition("#")[2]
    rules = (ROOT / "docs" / "rules.md").read_text()
    section = rules[rules.index(f"## {anchor}\n"):]
    fires_when = section.split("\n\n")[1].split("\n")[0]  # "**Fires when** waiting for ..."
    words = re.sub(r"[*`]", "", fires_when).split()[:6]
    assert "Why and the threshold" in html
    assert " ".join(words) in re.sub(r"<[^>]+>", "", html)


def test_mangled_rocm_kernel_names_are_short_and_readable_in_html(tmp_path):
    """A ROCm trace names kernels by their mangled symbol (hundreds of characters): the HTML
    table shows the demangled, shortened name, the whole symbol only in the tooltip."""
    mangled = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5"
               "ArrayIPcLi1EEEEEviT0_T1_")
    b = TraceBuilder()
    b.step(0, 0.0, 1000)
    b.launch(10, 5, name=mangled, k_ts=20, k_dur=400)
    page = render_html(report_result(b.write(tmp_path / "t.json")))
    kernels = page[page.index("Top kernels"):]
    assert f'title="{mangled}">vectorized_elementwise_kernel&lt;…&gt;</td>' in kernels
    assert f">{mangled}<" not in page
