"""Reports of a 1,024-rank job stay readable: the per-rank and straggler tables keep the
slowest, the fastest and the straggler, the spread of every rank is shown with the outliers
named, and --all-ranks brings back every row."""

from __future__ import annotations

import copy
import io
import re

import pytest
from rich.console import Console

import trainprof
from trainprof import structs
from trainprof.analysis.job.rank_table import SHOWN_ROWS
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.results import Analysis
from trainprof.analysis.sections.registry import run_job_sections
from trainprof.diagnose.engine import diagnose
from trainprof.report.html.report import render_html
from trainprof.report.markdown.report import to_markdown
from trainprof.report.terminal.report import print_analysis

from helpers.tracegen import TraceBuilder

RANKS = 1024
SLOW, FAST, IDLE = 700, 3, 5  # step 3x longer; step half as long; GPU idle 95%


def write_rank(path) -> None:
    """Three 1 ms steps: a 200 µs kernel, then a 500 µs all_reduce."""
    b = TraceBuilder()
    b.metadata["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": RANKS}
    for n in range(3):
        t = n * 1000
        b.step(n, t, 1000)
        b.launch(t + 10, 5, k_ts=t + 20, k_dur=200, name="volta_sgemm_128x64_nn")
        b.op("c10d::allreduce_", t + 280, 15)
        b.stream = 8
        b.launch(t + 285, 5, k_ts=t + 300, k_dur=500, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        b.stream = 7
    b.write(path)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Analysis:
    """1,024 copies of one analysed rank, three of them changed (analysing 1,024 files is the
    benchmark's work, benchmarks/bench_many_ranks.py)."""
    path = tmp_path_factory.mktemp("rank") / "rank0.json"
    write_rank(path)
    (base,) = trainprof.analyze(path).ranks
    ranks = []
    for k in range(RANKS):
        r = copy.deepcopy(base)
        r.rank = k
        factor = {SLOW: 3.0, FAST: 0.5}.get(k)
        if factor:
            for s in r.steps.per_step:
                s["ms"] *= factor
            r.steps = structs.replace(r.steps, mean_ms=r.steps.mean_ms * factor,
                                          median_ms=r.steps.median_ms * factor,
                                          p90_ms=r.steps.p90_ms * factor)
        if k == IDLE:
            r.timeline.idle_pct = 95.0
        ranks.append(r)
    analysis = Analysis(ranks=ranks, source="job", job=run_job_sections(ranks))
    analysis.findings = diagnose(analysis)
    return analysis


def text_of(analysis: Analysis) -> str:
    console = Console(file=io.StringIO(), width=120, record=True)
    print_analysis(analysis, console)
    return console.export_text()


def rank_rows(text: str) -> list[int]:
    """The ranks of the per-rank table's rows (a rank, then the step ms)."""
    start = text.index(f"{RANKS} ranks (ms per step")
    end = text.index("How the", start)
    return [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+\d+\.\d", text[start:end], re.M)]


def test_the_text_report_shows_the_spread_not_1024_rows(job):
    text = text_of(job)
    rows = rank_rows(text)
    assert SHOWN_ROWS <= len(rows) <= SHOWN_ROWS + 1 and {SLOW, FAST} <= set(rows)
    # The panel of the slowest rank is most of it: never a row per rank.
    assert len(text.splitlines()) < 600
    busy = [float(x) for x in re.findall(r"of the GPU's busy time: ([\d.]+)%", text)]
    assert all(x <= 100.0 for x in busy), busy
    assert f"How the {RANKS} ranks spread" in text
    assert "outliers in step time: rank 700 (3.0 ms), rank 3 (0.5 ms)" in text
    assert "outliers in idle: rank 5 (95%)" in text
    assert f"of {RANKS} ranks: the slowest" in text and "--all-ranks shows all" in text


def test_all_ranks_shows_every_row(job):
    text = text_of(structs.replace(job, options=AnalyzeOptions(all_ranks=True)))
    assert sorted(rank_rows(text)) == list(range(RANKS))


def test_the_markdown_comment_shows_the_spread(job):
    md = to_markdown(job)
    rows = [line for line in md.splitlines() if re.match(r"\| \d+ \| ", line)]
    assert SHOWN_ROWS <= len(rows) <= 2 * (SHOWN_ROWS + 1)  # ranks, then stragglers
    spread = next(line for line in md.splitlines() if line.startswith("| step time ms |"))
    assert "rank 700 (3.0 ms), rank 3 (0.5 ms)" in spread
    assert len(md.splitlines()) < 300


def test_the_html_page_keeps_the_ranks_it_names_and_draws_histograms(job):
    page = render_html(job)
    side = page[page.index('<section id="ranks">'):page.index("How the ranks spread</h3>")]
    assert side.count("<tr>") <= 2 * (SHOWN_ROWS + 2)  # the side-by-side and straggler tables
    assert f"of {RANKS} ranks side by side" in side
    spread = page[page.index("How the ranks spread</h3>"):page.index("</section>",
                                                                    page.index('id="ranks"'))]
    assert "rank 700 (3.0 ms), rank 3 (0.5 ms)" in spread
    assert spread.count("Ranks by ") >= 3  # a histogram per figure
    assert spread.count("<svg") == len(job.job.rank_table.spread)
    assert "more ranks are in the histograms and the JSON result only" in page
