"""One cause, one saving (issue 25): findings on the same time share a saving, a saving is
capped by the critical path, a rank's distinct savings fit in its step, and a job's finding on
a rank that is not the slowest says so. On the traces of tests/diagnose/savings_traces.py."""

from __future__ import annotations

import io
import json

import pytest
import savings_traces as st
from rich.console import Console

import trainprof
from trainprof.report.html.report import render_html
from trainprof.report.json import to_json_bytes
from trainprof.report.markdown.report import to_markdown
from trainprof.report.terminal.report import print_analysis

from helpers.paths import BIG_TRACE, TRACE_FILTER
from helpers.tracegen import TraceBuilder


@pytest.fixture(scope="module")
def mi300(tmp_path_factory):
    return trainprof.analyze(st.mi300_ddp(tmp_path_factory.mktemp("mi300") / "rank0.json"))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return trainprof.analyze(st.overfull_job(tmp_path_factory.mktemp("job") / "job"))


def _by_id(a) -> dict:
    return {f.id: f for f in a.findings}


def test_two_findings_on_one_exposed_communication_share_one_saving(mi300):
    found = _by_id(mi300)
    exposed, slow = found["communication_exposed"], found["slow_collectives"]
    assert slow.extra["saving_shared_with"] == "communication_exposed"
    assert "saving_shared_with" not in exposed.extra
    assert mi300.findings.index(exposed) < mi300.findings.index(slow)
    assert slow.saving_pct <= exposed.saving_pct
    data = json.loads(to_json_bytes(mi300))
    shared = next(f for f in data["findings"] if f["id"] == "slow_collectives")
    assert shared["saving_shared_with"] == "communication_exposed"


def test_exposed_communication_is_capped_by_the_collectives_what_if(mi300):
    """The all-reduce (2010-8000 µs) is exposed for 66% of the 9020 µs step, but the kernel
    after it is launched only at 6010 µs: without the all-reduce it would run 6010-7010 (plus
    the launch lag) instead of 8010-9010, and the step end 2000 µs earlier, 22% of the step."""
    exposed = _by_id(mi300)["communication_exposed"]
    share = next(e.value for e in exposed.evidence if e.what == "of the step")
    assert share == pytest.approx((st.ALL_REDUCE[1] - st.ALL_REDUCE[0]) / st.STEP_US * 100,
                                  abs=0.1)
    kernel = st.ADD_KERNEL[1] - st.ADD_KERNEL[0]
    without = st.ADD_LAUNCH_END + kernel  # the launch lag (a few µs) comes on top
    reference = (st.ADD_KERNEL[1] - without) / st.STEP_US * 100
    assert reference - 0.2 <= exposed.saving_pct <= reference
    assert exposed.extra["saving_capped_by"] == "critical_path"
    for f in (exposed, _by_id(mi300)["slow_collectives"]):
        assert f.saving_ms == pytest.approx(f.saving_pct / 100 * st.STEP_US / 1000, rel=1e-3)


def test_every_renderer_says_the_same_time_as_the_finding(mi300):
    number = [f.id for f in mi300.findings].index("communication_exposed") + 1
    phrase = f"the same time as finding {number}"
    console = Console(record=True, width=200, file=io.StringIO())
    print_analysis(mi300, console)
    text = console.export_text()
    assert f"saves {phrase}" in text
    assert phrase in to_markdown(mi300)
    assert f"saves {phrase}" in render_html(mi300)
    # the costliest finding keeps its own saving
    assert f"saves ~{_by_id(mi300)['communication_exposed'].saving_pct:.0f}%" in text


def test_a_rank_whose_savings_add_past_its_step_is_cut_to_the_step(job):
    """Rank 0: six steps of 10, 30, 10, 10, 30, 10 ms (mean 16.7 ms), each 4 ms of optimizer and
    the rest data: data 76 of 100 ms (76%), and the two slow steps' excess over the 10 ms
    median 40 of 100 ms (40%): 116% of the step together."""
    steps = st.RANK0_STEPS
    total = sum(d + o for d, o in steps)
    data = sum(d for d, _ in steps) / total * 100
    median = sorted(d + o for d, o in steps)[len(steps) // 2]
    excess = sum(max(d + o - median, 0.0) for d, o in steps) / total * 100
    assert data + excess > 100
    found = _by_id(job)
    assert found["data_loading"].saving_pct == pytest.approx(data, abs=0.1)
    variance = found["step_variance"]
    assert variance.rank == 0 and variance.saving_pct == pytest.approx(100 - data, abs=0.1)
    assert variance.extra["saving_capped_by"] == "step"
    assert any(e.what.startswith("saving capped by the step (was 40.0%") for e in variance.evidence)
    on_rank0 = [f.saving_pct for f in job.findings
                if f.rank == 0 and "saving_shared_with" not in f.extra]
    assert sum(on_rank0) <= 100 + 1e-6


def test_a_saving_off_the_slowest_rank_says_which_rank_it_is_on(job):
    """The optimizer's saving is largest on rank 1 (7.5 of 9 ms: 62.5% of its step, x 0.75 for
    a fused SGD), but rank 0 (median 10 ms) sets the job's pace; there it is 24 of 100 ms."""
    f = _by_id(job)["optimizer_overhead"]
    assert f.rank == 1 and f.extra["slowest_rank"] == 0
    there = sum(o for _, o in st.RANK0_STEPS) / sum(d + o for d, o in st.RANK0_STEPS) * 75
    note = next(e for e in f.evidence if "not on the slowest rank" in e.what)
    assert note.value == 0 and f"it saves {there:.0f}% there" in note.where
    console = Console(record=True, width=200, file=io.StringIO())
    print_analysis(job, console)
    assert "rank 1 (not the slowest: rank 0)" in console.export_text()
    assert "rank 1 (not the slowest: rank 0)" in to_markdown(job)
    assert "slowest" not in _by_id(job)["data_loading"].extra  # on the slowest rank itself


@pytest.fixture(scope="module")
def big():
    return trainprof.analyze(BIG_TRACE)


def test_a_real_host_bound_rank_counts_its_launch_gaps_once(big):
    """The 53 MB DDP recommender rank: small_kernels' launch gaps are part of host_bound's GPU
    idle; its exposed communication (21% of the step) is off this host-bound step's critical
    path, which holds no collective: capped at the path's communication and sync waits."""
    found = _by_id(big)
    assert found["small_kernels"].extra["saving_shared_with"] == "host_bound"
    exposed = found["communication_exposed"]
    r = next(x for x in big.ranks if x.rank == exposed.rank)
    path = r.sections.critical_path
    on_path = path.split_us["gpu_communication"] + path.split_us["sync_wait"]
    bound = on_path / len(path.steps) / 1000 / r.steps.mean_ms * 100
    share = next(e.value for e in exposed.evidence if e.what == "of the step")
    assert share > 20 and exposed.saving_pct == pytest.approx(bound, abs=0.06)
    assert exposed.extra["saving_capped_by"] == "critical_path"
    assert exposed.severity == "low"  # a 0.1% saving: low, whatever the exposed share


def test_a_real_jobs_verdict_names_the_rank_that_is_not_the_slowest():
    """trace_filter: host_bound is largest on rank 0 (54%), but rank 1 has the longer median
    step; the verdict says the saving is on rank 0, and what it is on rank 1."""
    a = trainprof.analyze(TRACE_FILTER)
    slowest = a.job.rank_table.slowest
    host = _by_id(a)["host_bound"]
    assert slowest == 1 and host.rank == 0 and host.extra["slowest_rank"] == 1
    on_slowest = next(r for r in a.ranks if r.rank == 1).sections.host.pct["host_bound"]
    note = next(e for e in host.evidence if "not on the slowest rank" in e.what)
    assert f"it saves {on_slowest:.0f}% there" in note.where
    html = render_html(a)
    assert "of step time on rank 0 (not the slowest: rank 1)" in html


def test_gloo_collectives_on_the_host_are_bounded_by_the_host_side_of_the_path(tmp_path):
    """A CPU job over gloo: its all-reduce is a host op (8 of each 10 ms step, nothing else
    running), host time on the critical path, not device communication: the path does not
    cut the exposed time down to the (absent) device communication."""
    for rank in (0, 1):
        b = TraceBuilder()
        b.metadata["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
        for n in range(3):
            t = n * 10_000
            b.step(n, t, 10_000)
            b.op("aten::mm", t + 10, 900)
            b.op("gloo:all_reduce", t + 1_500, 8_000)
        b.write(tmp_path / f"rank{rank}.json")
    a = trainprof.analyze(tmp_path)
    f = _by_id(a)["communication_exposed"]
    assert f.saving_pct == pytest.approx(80.0, abs=0.5)
    assert "saving_capped_by" not in f.extra
