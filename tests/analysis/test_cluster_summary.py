"""Cluster summaries offline: compact, the same job-level view as the traces, each rank once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import msgspec
import pytest

import trainprof
from trainprof.analysis.job.cluster_file import RankEntry, decode_document
from trainprof.analysis.job.summary import encode
from trainprof.cluster_summary import cluster_document, summarize_traces, write_cluster_summary
from trainprof.diagnose.findings import Finding

from helpers.paths import ROOT, TRACE_FILTER
from rank_scenarios import gpu_rank

RANK_FILES = sorted(TRACE_FILTER.glob("sampled_rank-*.json.gz"))


def summary_of(files_by_rank: dict, out_dir, world_size=None, failed=()):
    """What rank 0 writes in the job: every rank's summaries of its own files."""
    entries = [RankEntry(rank=r, summaries=summarize_traces(files, rank=r))
               for r, files in sorted(files_by_rank.items())]
    entries += [RankEntry(rank=r, error="TraceError: broken") for r in failed]
    doc = cluster_document(entries, world_size or len(entries))
    return write_cluster_summary(out_dir, doc)


def same_job_view(a, b) -> None:
    assert a.job.stragglers.to_dict() == b.job.stragglers.to_dict()
    assert a.job.rank_table.to_dict() == b.job.rank_table.to_dict()
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]


def test_a_summary_gives_the_job_view_of_the_traces(tmp_path):
    """Real ranks: the straggler analysis, the per-rank table and the findings read from the
    summary equal those read from the traces, to the last bit."""
    path = summary_of({0: [RANK_FILES[0]], 1: [RANK_FILES[1]]}, tmp_path)
    same_job_view(trainprof.analyze(TRACE_FILTER), trainprof.analyze(path))
    doc = decode_document(path)
    assert doc.complete and [s.rank for s in doc.ranks] == [0, 1]
    assert doc.job["stragglers"]["matched_collectives"] == 10  # the job view, as written
    assert {f["id"] for f in doc.findings} == {f.id for f in trainprof.analyze(path).findings}


def test_a_rank_summary_is_a_few_kb():
    for file in RANK_FILES:
        (summary,) = summarize_traces([file])
        assert len(encode(summary)) < 8_000, file.name  # the trace is megabytes of JSON
        assert len(summary.communication.instances.dur_us) == 10


def test_synthetic_straggler_survives_the_summary(tmp_path):
    traces = tmp_path / "traces"
    for rank, extra in ((0, None), (1, {"data loading": 400}), (2, None)):
        gpu_rank(rank, extra).write(traces / f"rank{rank}.json")
    path = summary_of({r: [traces / f"rank{r}.json"] for r in range(3)}, tmp_path)
    from_summary = trainprof.analyze(path)
    same_job_view(trainprof.analyze(traces), from_summary)
    assert from_summary.job.stragglers.cause.reason == "data loading"
    assert from_summary.job.rank_table.to_dict()["rows"][1]["phases_ms"]["data"] > 0.3


def test_a_folder_with_traces_and_summary_counts_each_rank_once(tmp_path):
    for file in RANK_FILES:
        shutil.copy(file, tmp_path / file.name)
    summary_of({0: [RANK_FILES[0]], 1: [RANK_FILES[1]]}, tmp_path)
    both = trainprof.analyze(tmp_path)
    assert [(r.rank, r.window) for r in both.ranks] == [(0, 0), (1, 0)]
    assert all(r.sections.operators is not None for r in both.ranks)  # the traces were preferred
    same_job_view(trainprof.analyze(TRACE_FILTER), both)


def test_ranks_without_a_trace_here_come_from_the_summary(tmp_path):
    shutil.copy(RANK_FILES[0], tmp_path / RANK_FILES[0].name)
    summary_of({0: [RANK_FILES[0]], 1: [RANK_FILES[1]]}, tmp_path, world_size=3, failed=[2])
    mixed = trainprof.analyze(tmp_path)
    assert [r.rank for r in mixed.ranks] == [0, 1]
    assert mixed.ranks[0].sections.operators is not None and mixed.ranks[1].sections.operators is None
    assert any("rank 1 read from" in n for n in mixed.notes)
    assert any("Rank 2 could not summarise its trace (TraceError: broken)" in n
               for n in mixed.notes)
    assert mixed.job.stragglers.matched == 10  # matched across the trace and the summary


def test_the_document_marks_failed_missing_and_unrecorded_ranks(tmp_path):
    (summary,) = summarize_traces([RANK_FILES[0]])
    entries = [RankEntry(rank=0, summaries=[summary]), RankEntry(rank=1, error="OSError: x"),
               None, RankEntry(rank=3, recorded=False)]
    doc = cluster_document(entries, world_size=4)
    assert (doc.complete, doc.missing, doc.not_recorded) == (False, [2], [3])
    assert [(f.rank, f.error) for f in doc.failed] == [(1, "OSError: x")]
    analysis = trainprof.analyze(write_cluster_summary(tmp_path, doc))
    assert [r.rank for r in analysis.ranks] == [0]
    assert any("rank 2 sent no summary in time" in n for n in analysis.notes)
    assert any("rank 3 not recorded" in n for n in analysis.notes)


def test_findings_round_trip():
    findings = trainprof.analyze(TRACE_FILTER).findings
    assert len(findings) >= 2
    for f in findings:
        d = json.loads(msgspec.json.encode(f.to_dict(), enc_hook=float))
        assert Finding.from_dict(d).to_dict() == d


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_cli_reads_a_summary(tmp_path):
    path = summary_of({0: [RANK_FILES[0]], 1: [RANK_FILES[1]]}, tmp_path)
    text = run_cli("analyze", str(path))
    assert text.returncode == 0, text.stderr
    assert "2 ranks" in text.stdout and "slowest" in text.stdout and "fastest" in text.stdout
    md = run_cli("analyze", str(path), "--format", "md")
    assert "### Ranks (ms per step)" in md.stdout and "**slowest**" in md.stdout


@pytest.mark.parametrize("content, says", [
    (b'{"schema": "trainprof.cluster/2", "world_size": "two"}', "not a valid cluster summary"),
    (b'{"schema": "trainprof.cluster/1", "world_size": 2, "complete": true, "ranks": []}',
     "parallelism sections are in the shape written before 2026-11-29: analyse the traces"),
    (b'{"schema": "trainprof.cluster/9", "world_size": 2, "complete": true, "ranks": []}',
     "schema 'trainprof.cluster/9'"),
    (b"{not json", "not a valid cluster summary"),
])
def test_a_bad_summary_is_one_line_and_exit_2(tmp_path, content, says):
    path = tmp_path / "cluster_summary.json"
    path.write_bytes(content)
    done = run_cli("analyze", str(path))
    assert done.returncode == 2
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_html_report_of_a_summary(tmp_path):
    traces = tmp_path / "traces"
    for rank, extra in ((0, None), (1, {"data loading": 400}), (2, None)):
        gpu_rank(rank, extra).write(traces / f"rank{rank}.json")
    path = summary_of({r: [traces / f"rank{r}.json"] for r in range(3)}, tmp_path / "job")
    done = run_cli("report", str(path), "-o", str(tmp_path / "report.html"))
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "report.html").read_text()
    assert "Rank 1 is a straggler, held back by its data loading" in html
