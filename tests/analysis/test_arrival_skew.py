"""Arrival skew and transfer across ranks (analysis/job/arrival.py, docs/communication.md):
instances with known starts; a recorded DDP job whose rank 1 computes DELAY_S more every step
(tests/analysis/jobs/ddp_straggler.py) against its raw JSON, and its balanced control; no DDP
advice on the recorded FSDP and pipeline jobs; the same job figures from cluster summaries."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import numpy as np
import pytest

import trainprof
from trainprof.analysis.job.arrival import arrival
from trainprof.analysis.job.cluster_file import RankEntry
from trainprof.cluster_summary import cluster_document, summarize_traces
from trainprof.diagnose.rules import distributed, hardware
from trainprof.report.json import to_json_bytes

from helpers.ddp_recordings import DELAY_S, ddp_jobs  # noqa: F401 (a fixture)
from helpers.parallel_recordings import events, parallel_jobs, union  # noqa: F401 (a fixture)

DELAY_MS = DELAY_S * 1000.0
#: What only DDP has: its bucket size, gradient views, no_sync, communication hooks.
DDP_ADVICE = re.compile(r"DDP|DistributedDataParallel|bucket_cap_mb|gradient_as_bucket_view|"
                        r"no_sync|comm_hook|static_graph")


def test_known_instances_split_into_skew_and_transfer():
    """Three ranks, one step, two instances; rank 2 starts last in both. Instance 0: starts 0,
    100, 300 (durations 400, 300, 100); instance 1: 1000, 1000, 1200 (300, 300, 100); a third
    whose rank 0 start lies 5 ms before the others on its clock but lasts 50 µs (clamped)."""
    start = np.array([[0.0, 1000.0, 2000.0], [100.0, 1000.0, 7000.0], [300.0, 1200.0, 7000.0]])
    dur = np.array([[400.0, 300.0, 50.0], [300.0, 300.0, 80.0], [100.0, 100.0, 80.0]])
    split = arrival(start, dur, np.full((3, 3), np.inf), n_steps=1)
    # rank 0 waits 300 + 200 + 50 (its whole third call), transfers 100 + 100 + 0; rank 1
    # waits 200 + 200 and transfers 100 + 100 + 80.
    assert split.skew_ms.tolist() == pytest.approx([0.55, 0.4, 0.0])
    assert split.transfer_ms.tolist() == pytest.approx([0.2, 0.28, 0.28])
    # rank 2 starts last in the first two; in the third ranks 1 and 2 tie, the first counts.
    assert split.late.tolist() == [0, 1, 2]
    assert split.caused_ms.tolist() == pytest.approx([0.0, 0.05 / 2, (0.5 + 0.4) / 2])
    assert split.skew_pct == pytest.approx(950 / 1710 * 100)


def test_no_instance_is_no_skew():
    split = arrival(np.zeros((2, 0)), np.zeros((2, 0)), np.zeros((2, 0)), n_steps=0)
    assert split.skew_pct is None and split.skew_ms.tolist() == [0.0, 0.0]


def reference(folder: Path) -> dict[str, float]:
    """From the raw JSON: each ProfilerStep's gloo:all_reduce ranges matched across the ranks
    in order; rank 0's skew = rank 1's start - its own (within its call), transfer the rest;
    rank 1's caused skew = rank 0's skew where rank 1 started last. Unions per step, cut at the
    step's end, per step."""
    calls, steps = {}, {}
    for r in (0, 1):
        ev = events(folder / f"rank{r}.json")
        steps[r] = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e["name"].startswith("ProfilerStep#")}
        calls[r] = [e for e in ev if e["name"] == "gloo:all_reduce"]
    out = {"skew0": 0.0, "transfer0": 0.0, "caused1": 0.0}
    for name in steps[0]:
        spans = {r: steps[r][name] for r in (0, 1)}
        inside = {r: [e for e in calls[r] if spans[r][0] <= e["ts"] < spans[r][1]]
                  for r in (0, 1)}
        assert len(inside[0]) == len(inside[1]) > 0
        skew, rest, caused = [], [], []
        for a, b in zip(inside[0], inside[1], strict=True):
            wait = min(max(b["ts"] - a["ts"], 0.0), a["dur"])
            end = spans[0][1]
            skew.append((a["ts"], min(a["ts"] + wait, end)))
            rest.append((a["ts"] + wait, min(a["ts"] + a["dur"], end)))
            if b["ts"] > a["ts"]:
                caused.append(skew[-1])
        for key, spans_ in (("skew0", skew), ("transfer0", rest), ("caused1", caused)):
            out[key] += sum(e - s for s, e in union(spans_))
    return {k: v / len(steps[0]) / 1000.0 for k, v in out.items()}


@pytest.fixture(scope="module")
def ddp(ddp_jobs):  # noqa: F811
    return {job: trainprof.analyze(ddp_jobs / job) for job in ("ddp_slow", "ddp_balanced")}


@pytest.mark.slow
def test_compute_straggler_hidden_by_ddp_is_charged_to_the_late_rank(ddp, ddp_jobs):  # noqa: F811
    a = ddp["ddp_slow"]
    assert all("ddp" in r.sections.parallelism.kinds for r in a.ranks)
    s = a.job.stragglers
    ref = reference(ddp_jobs / "ddp_slow")
    fast, slow = s.ranks
    assert fast.skew_ms_per_step == pytest.approx(ref["skew0"], abs=1e-3)
    assert fast.transfer_ms_per_step == pytest.approx(ref["transfer0"], abs=1e-3)
    assert slow.caused_skew_ms_per_step == pytest.approx(ref["caused1"], abs=1e-3)
    assert slow.started_last == s.matched > 0 and slow.skew_ms_per_step == 0
    # The construction: rank 1 computes DELAY_S more every step.
    assert ref["caused1"] == pytest.approx(DELAY_MS, rel=0.3)
    top = a.findings[0]
    assert (top.id, top.rank, s.straggler) == ("straggler", 1, 1)
    assert top.saving_ms == pytest.approx(DELAY_MS, rel=0.3)
    assert s.cause is not None and s.cause.reason == "compute"
    assert top.fix is distributed.BALANCE_COMPUTE
    for f in a.findings:
        assert not DDP_ADVICE.search(f.fix.summary), (f.id, f.fix.summary)
    # rank 0's wait is the straggler's, not exposed communication of its own.
    assert not [f for f in a.findings if f.id == "communication_exposed" and f.rank == 0]
    assert "rank 1 started last" in s.arrival


@pytest.mark.slow
def test_the_reports_show_the_skew(ddp):
    import io

    from rich.console import Console

    from trainprof.report.html.report import render_html
    from trainprof.report.markdown.report import to_markdown
    from trainprof.report.sections.stragglers import text as stragglers_text
    from trainprof.report.sections.view import ViewContext

    a = ddp["ddp_slow"]
    s = a.job.stragglers
    said = f"cost the others {s.ranks[1].caused_skew_ms_per_step:.2f} ms per step"
    assert said in s.arrival and f"{s.skew_pct:.0f}% of the time" in s.arrival
    assert said in to_markdown(a)
    html = render_html(a)
    assert said in html and "caused skew ms/step" in html
    console = Console(file=io.StringIO(), width=100)
    console.print(stragglers_text(s, ViewContext()))
    text = console.file.getvalue()
    assert "skew ms" in text and f"{s.ranks[0].skew_ms_per_step:.2f}" in text


@pytest.mark.slow
def test_the_balanced_ddp_job_has_no_straggler(ddp):
    a = ddp["ddp_balanced"]
    assert a.job.stragglers.straggler is None, a.job.stragglers.notes
    assert "straggler" not in {f.id for f in a.findings}


def _fix_text(fix) -> str:
    return " ".join([fix.summary, fix.pytorch, fix.accelerate])


@pytest.fixture(scope="module")
def parallel(parallel_jobs):  # noqa: F811
    return {job: trainprof.analyze(parallel_jobs / job)
            for job in ("fsdp", "pipeline_heavy", "pipeline_balanced")}


@pytest.mark.slow
@pytest.mark.parametrize("job", ["fsdp", "pipeline_heavy", "pipeline_balanced"])
def test_no_ddp_advice_outside_ddp(parallel, job):
    a = parallel[job]
    for f in a.findings:
        assert not DDP_ADVICE.search(_fix_text(f.fix)), (f.id, _fix_text(f.fix))
    for r in a.ranks:
        assert "ddp" not in r.sections.parallelism.kinds
        # Whatever rule would give them: the communication and small-message fixes.
        for fix in (distributed.overlap_fix(r, "gloo"), hardware._small_messages_fix(r)):
            assert not DDP_ADVICE.search(_fix_text(fix)), _fix_text(fix)


def _from_summaries(folder: Path):
    entries = [RankEntry(rank=r, summaries=summarize_traces([folder / f"rank{r}.json"], rank=r))
               for r in (0, 1)]
    return cluster_document(entries, world_size=2)


@pytest.mark.slow
def test_cluster_summaries_give_the_same_parallel_job_figures(  # noqa: F811
        parallel_jobs, parallel, ddp_jobs, ddp):  # noqa: F811
    docs = {}
    for folder, local in ((parallel_jobs / "pipeline_heavy", parallel["pipeline_heavy"]),
                          (ddp_jobs / "ddp_slow", ddp["ddp_slow"])):
        doc = docs[folder.name] = _from_summaries(folder)
        job = msgspec.json.decode(to_json_bytes({k: v.to_dict() for k, v in local.job.items()}))
        assert doc.job == job
        assert [f["id"] for f in doc.findings] == [f.id for f in local.findings]
    assert docs["pipeline_heavy"].job["pipeline"]["stages"]
    assert docs["ddp_slow"].job["stragglers"]["ranks"][1]["caused_skew_ms_per_step"] > 0
