"""The parallelism section and the pipeline job section on recorded two-rank gloo jobs
(tests/analysis/jobs/parallel_jobs.py: a pipeline whose stage 1 holds 4x the layers of stage 0,
its balanced control, an FSDP2 job), each figure checked against a reference reading of the raw
trace in tests/parallel_recordings.py; and detection on small synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest

import trainprof
from parallel_recordings import (
    comm_spans,
    cpu_compute,
    events,
    length_inside,
    minus,
    parallel_jobs,  # noqa: F401 (a fixture)
    profiler_steps,
)
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.parallelism.section import parallelism
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file

pytestmark = pytest.mark.slow  # records a two-rank torch.distributed job (seconds)

#: Names the section relies on, as torch 2.13 writes them (gloo on CPU).
PIPELINE_NAMES = {"c10d::send", "gloo:send", "c10d::recv_", "gloo:recv", "Forward 0",
                  "Backward 3", "ProfilerStep#2"}
FSDP_NAMES = {"FSDP::all_gather (0)", "FSDP::pre_forward (2)", "FSDP::pre_backward (2)",
              "FSDP::post_backward_reduce (2)", "FSDP::root_post_backward_callback",
              "c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "gloo:all_gather"}


@pytest.fixture(scope="module")
def analyses(parallel_jobs):  # noqa: F811
    return {job: trainprof.analyze(parallel_jobs / job)
            for job in ("pipeline_heavy", "pipeline_balanced", "fsdp")}


def test_the_traces_hold_the_names_relied_on(parallel_jobs):  # noqa: F811
    for job, names in (("pipeline_heavy", PIPELINE_NAMES), ("fsdp", FSDP_NAMES)):
        for rank in (0, 1):
            seen = {e["name"] for e in events(parallel_jobs / job / f"rank{rank}.json")}
            assert names <= seen, (job, rank, names - seen)


def test_the_parallelism_is_named(analyses):
    for job, kinds in (("pipeline_heavy", ["pipeline"]), ("pipeline_balanced", ["pipeline"]),
                       ("fsdp", ["fsdp"])):
        for r in analyses[job].ranks:
            p = r.sections.parallelism
            assert p.kinds == kinds, (job, r.rank, p.evidence)
            groups = [(g.description, g.size, g.ranks) for g in p.process_groups]
            assert groups == [("default_pg", 2, [0, 1])]
    heavy = analyses["pipeline_heavy"]
    for r in heavy.ranks:  # 4 micro-batches a step
        steps = r.sections.parallelism.steps
        assert r.sections.parallelism.calls == {"send": 4 * steps, "recv": 4 * steps}
    fsdp = analyses["fsdp"].ranks[0].sections.parallelism
    assert fsdp.calls["all_gather"] == fsdp.steps * 2 * 4  # forward and backward, 4 layers
    assert fsdp.calls["reduce_scatter"] == fsdp.steps * 4
    assert "ranks" in analyses["fsdp"].to_dict()["ranks"][0]["parallelism"]["process_groups"][0]


def test_pipeline_stage_figures_against_the_raw_trace(analyses, parallel_jobs):  # noqa: F811
    heavy = analyses["pipeline_heavy"]
    for r in heavy.ranks:
        p = r.sections.parallelism
        ev = events(parallel_jobs / "pipeline_heavy" / f"rank{r.rank}.json")
        compute, waiting = cpu_compute(ev), minus(comm_spans(ev), cpu_compute(ev))
        steps = profiler_steps(ev)
        # Within 0.1 µs: the trace model keeps times in whole nanoseconds, the reference reads
        # the JSON's floats, and a step's sum of a few hundred boundaries differs by ~0.01 µs.
        assert [s.compute_us for s in p.stage_steps] == pytest.approx(
            [length_inside(compute, lo, hi) for lo, hi in steps], rel=1e-6, abs=0.1)
        assert [s.p2p_exposed_us for s in p.stage_steps] == pytest.approx(
            [length_inside(waiting, lo, hi) for lo, hi in steps], rel=1e-6, abs=0.1)
        for s in p.stage_steps:
            assert s.warmup_wait_us + s.steady_wait_us + s.cooldown_wait_us == \
                pytest.approx(s.p2p_exposed_us)
        assert (p.micro_batches, p.schedule) == (4, "GPipe")
        assert p.role == ("first" if r.rank == 0 else "last")
    pipe = heavy.job.pipeline
    assert [(s.stage, s.rank) for s in pipe.stages] == [(0, 0), (1, 1)]
    assert pipe.ideal_bubble_pct == pytest.approx(100 * 1 / 5)
    assert pipe.heaviest.stage == 1
    c0, c1 = (s.compute_ms for s in pipe.stages)
    assert pipe.imbalance_saving_ms == pytest.approx(5 / 4 * (c1 - (c0 + c1) / 2))
    # The construction: stage 1 holds 4x the layers of stage 0 (on a loaded machine its ops
    # also stretch more: only a lower bound holds).
    assert c1 / c0 > 2.5
    balanced = analyses["pipeline_balanced"].job.pipeline
    assert balanced.micro_batches == 8 and balanced.ideal_bubble_pct == pytest.approx(100 / 9)
    b0, b1 = (s.compute_ms for s in balanced.stages)
    assert 0.5 < b0 / b1 < 2


def test_fsdp_layers_against_the_raw_trace(analyses, parallel_jobs):  # noqa: F811
    r = analyses["fsdp"].ranks[0]
    p = r.sections.parallelism
    ev = events(parallel_jobs / "fsdp" / "rank0.json")
    waiting = minus(comm_spans(ev), cpu_compute(ev))
    lo, hi = profiler_steps(ev)[0][0], profiler_steps(ev)[-1][1]

    def exposed(prefix: str, layer: str) -> float:
        spans = [(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in ev
                 if e["name"].startswith(prefix) and e["name"].endswith(f"({layer})")]
        return sum(length_inside(waiting, s, t) for s, t in spans if t > s)

    layers = {x.layer: x for x in p.layers}
    assert set(layers) == {"0", "2", "4", "6"}
    for name, x in layers.items():
        assert x.forward_gather_us == pytest.approx(exposed("FSDP::pre_forward", name), rel=1e-6)
        assert x.backward_gather_us == pytest.approx(exposed("FSDP::pre_backward", name),
                                                     rel=1e-6)
        assert x.gathers == p.steps * 2
    assert sum(x.forward_gather_us for x in layers.values()) > 0


def test_streamed_window_by_window_equals_whole(parallel_jobs):  # noqa: F811
    for job in ("pipeline_heavy", "fsdp"):
        trace = load_file(parallel_jobs / job / "rank1.json")
        steps = find_steps(trace)
        whole = parallelism(trace, steps)
        streamed = parallelism.over(windows_of(trace, steps, 1), steps)
        assert streamed.kinds == whole.kinds and streamed.calls == whole.calls
        assert (streamed.micro_batches, streamed.role) == (whole.micro_batches, whole.role)
        for a, b in zip(streamed.stage_steps, whole.stage_steps, strict=True):
            assert np.allclose([a.compute_us, a.p2p_us, a.p2p_exposed_us, a.step_us],
                               [b.compute_us, b.p2p_us, b.p2p_exposed_us, b.step_us])
        assert [x.layer for x in streamed.layers] == [x.layer for x in whole.layers]
        assert np.allclose([x.exposed_us for x in streamed.layers],
                           [x.exposed_us for x in whole.layers])


def test_the_reports_show_it(analyses):
    import io

    from rich.console import Console

    from trainprof.report.html.report import render_html
    from trainprof.report.markdown.report import to_markdown
    from trainprof.report.terminal.parallelism import render_parallelism, render_pipeline

    heavy, fsdp = analyses["pipeline_heavy"], analyses["fsdp"]
    md = to_markdown(heavy)
    assert "### Parallelism" in md and "| 1 | 1 |" in md
    html = render_html(heavy)
    assert "Pipeline stages" in html and "default_pg" in html
    assert "FSDP layers" in render_html(fsdp)
    console = Console(file=io.StringIO(), width=120)
    console.print(render_pipeline(heavy.job.pipeline))
    console.print(render_parallelism(fsdp.ranks[0].sections.parallelism))
    text = console.file.getvalue()
    assert "heaviest" in text and "Parallelism: FSDP" in text and "reduce-scatter" in text
