"""The parallelism section and the pipeline job section on recorded two-rank gloo jobs
(tests/analysis/jobs/parallel_jobs.py: a pipeline whose stage 1 holds 4x the layers of stage 0,
its balanced control and the same fed too few micro-batches; FSDP2 without prefetch, with
prefetch, and with a slow rank), each figure checked against a reference reading of the raw
trace in tests/helpers/parallel_recordings.py; and detection on small synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest

import trainprof
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.parallelism.section import parallelism
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file

from helpers.parallel_recordings import (
    comm_spans,
    cpu_compute,
    events,
    fsdp_waits,
    length_inside,
    minus,
    parallel_jobs,  # noqa: F401 (a fixture)
    prefetch_distances,
    profiler_steps,
    union,
)

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
            for job in ("pipeline_heavy", "pipeline_balanced", "pipeline_few", "fsdp",
                        "fsdp_prefetch", "fsdp_slow_rank")}


def test_the_traces_hold_the_names_relied_on(parallel_jobs):  # noqa: F811
    for job, names in (("pipeline_heavy", PIPELINE_NAMES), ("fsdp", FSDP_NAMES)):
        for rank in (0, 1):
            seen = {e["name"] for e in events(parallel_jobs / job / f"rank{rank}.json")}
            assert names <= seen, (job, rank, names - seen)


def test_the_parallelism_is_named(analyses):
    for job, kinds in (("pipeline_heavy", ["pipeline"]), ("pipeline_balanced", ["pipeline"]),
                       ("pipeline_few", ["pipeline"]), ("fsdp", ["fsdp"]),
                       ("fsdp_prefetch", ["fsdp"]), ("fsdp_slow_rank", ["fsdp"])):
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
    # 2 micro-steps a step, each gathering 3 layers in forward and again in backward; the
    # gradients reduce-scattered once a step.
    assert fsdp.calls["all_gather"] == fsdp.steps * 2 * 2 * 3
    assert fsdp.calls["reduce_scatter"] == fsdp.steps * 3
    assert analyses["pipeline_few"].job.pipeline.micro_batches == 2
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
        pipe = p.pipeline
        assert [s.compute_ms * 1000 for s in pipe.per_step] == pytest.approx(
            [length_inside(compute, lo, hi) for lo, hi in steps], rel=1e-6, abs=0.1)
        assert [s.p2p_exposed_ms * 1000 for s in pipe.per_step] == pytest.approx(
            [length_inside(waiting, lo, hi) for lo, hi in steps], rel=1e-6, abs=0.1)
        for s in pipe.per_step:
            assert s.warmup_wait_ms + s.steady_wait_ms + s.cooldown_wait_ms == \
                pytest.approx(s.p2p_exposed_ms)
        assert (pipe.micro_batches, pipe.schedule) == (4, "GPipe")
        assert pipe.role == ("first" if r.rank == 0 else "last")
    pipe = heavy.job.pipeline
    assert [(s.stage, s.rank) for s in pipe.stages] == [(0, 0), (1, 1)]
    assert pipe.ideal_bubble_pct == pytest.approx(100 * 1 / 5)
    assert pipe.heaviest.stage == 1
    c0, c1 = (s.compute_ms for s in pipe.stages)
    assert pipe.imbalance_saving_ms == pytest.approx(5 / 4 * (c1 - (c0 + c1) / 2))
    # The construction: stage 1 holds 4x the layers of stage 0 (24 matmuls a micro-batch to
    # stage 0's 5), but stage 0 also carries the schedule's own work per micro-batch, which
    # stretches most on a loaded machine: 3.0x measured alone on an idle machine, 2.4x with
    # another test run beside it, 1.71x in a CI run (stage 0's compute 1.9x its idle figure,
    # stage 1's 1.05x: one core slowed by the host), so only a lower bound holds.
    assert c1 / c0 > 1.4
    balanced = analyses["pipeline_balanced"].job.pipeline
    assert balanced.micro_batches == 8 and balanced.ideal_bubble_pct == pytest.approx(100 / 9)
    b0, b1 = (s.compute_ms for s in balanced.stages)
    assert 0.5 < b0 / b1 < 2


@pytest.mark.parametrize("job", ["fsdp", "fsdp_prefetch"])
def test_fsdp_layers_against_the_raw_trace(analyses, parallel_jobs, job):  # noqa: F811
    for r in analyses[job].ranks:
        p = r.sections.parallelism
        ev = events(parallel_jobs / job / f"rank{r.rank}.json")
        waits = fsdp_waits(ev)
        layers = {x.layer: x for x in p.layers}
        assert set(layers) - {""} == {"0", "2", "4"}  # "": the root, when it waited
        us = p.steps * 1000.0  # the figures are ms per step
        if "" in layers:
            assert layers[""].reduce_scatter_ms * us == pytest.approx(waits[("", "reduce")],
                                                                      rel=1e-6, abs=0.1)
        for name, x in layers.items():
            if not name:
                continue
            assert x.forward_gather_ms * us == pytest.approx(waits.get((name, "forward"), 0.0),
                                                             rel=1e-6, abs=0.1)
            assert x.backward_gather_ms * us == pytest.approx(
                waits.get((name, "backward"), 0.0), rel=1e-6, abs=0.1)
            assert x.reduce_scatter_ms * us == pytest.approx(waits.get((name, "reduce"), 0.0),
                                                             rel=1e-6, abs=0.1)
            assert x.gathers_per_step == 2 * 2
        assert sum(x.forward_gather_ms for x in layers.values()) > 0


def test_fsdp_prefetch_distances(analyses, parallel_jobs):  # noqa: F811
    # The construction: without prefetch every forward all-gather is issued in its own layer's
    # pre_forward (0), and FSDP2's default backward prefetch gathers each layer during the
    # backward of the layer after it (1), except the first layer of backward (4); with
    # prefetch each layer is gathered during the one before it, except the first of each pass.
    expected = {"fsdp": ({"0": 0, "2": 0, "4": 0}, {"0": 1, "2": 1, "4": 0}),
                "fsdp_prefetch": ({"0": 0, "2": 1, "4": 1}, {"0": 1, "2": 1, "4": 0})}
    for job, (forward, backward) in expected.items():
        for r in analyses[job].ranks:
            p = r.sections.parallelism
            reference = prefetch_distances(events(parallel_jobs / job / f"rank{r.rank}.json"))
            layers = [x for x in p.layers if x.layer]  # not the root: it gathers nothing
            for x in layers:
                assert sorted(x.forward_distances) == sorted(reference[(x.layer, "forward")])
                assert sorted(x.backward_distances) == sorted(reference[(x.layer, "backward")])
            assert {x.layer: x.forward_prefetch_distance for x in layers} == forward, job
            assert {x.layer: x.backward_prefetch_distance for x in layers} == backward, job
            row = next(x for x in p.to_dict()["fsdp_layers"] if x["layer"] == "2")
            assert row["forward_prefetch_distance"] == forward["2"]


def test_fsdp_collectives_serialised(analyses, parallel_jobs):  # noqa: F811
    """On gloo, FSDP's all-gathers and reduce-scatters (run as gloo:all_reduce) go through one
    process group: the figures against the gloo ranges of the raw trace."""
    for job in ("fsdp", "fsdp_prefetch", "fsdp_slow_rank"):
        for r in analyses[job].ranks:
            q = r.sections.parallelism.fsdp_queues
            ev = events(parallel_jobs / job / f"rank{r.rank}.json")
            lo, hi = profiler_steps(ev)[0][0], profiler_steps(ev)[-1][1]

            gathers, reductions = (_clipped(ev, name, lo, hi)
                                   for name in ("gloo:all_gather", "gloo:all_reduce"))
            overlap = sum(length_inside(gathers, s, t) for s, t in reductions)
            us = r.sections.parallelism.steps * 1000.0  # the figures are ms per step
            assert q.gather_ms * us == pytest.approx(length_inside(gathers, lo, hi), abs=0.1)
            assert q.reduce_ms * us == pytest.approx(length_inside(reductions, lo, hi), abs=0.1)
            assert q.overlap_ms * us == pytest.approx(overlap, abs=0.1)
            assert q.serialised == (q.overlap_ms <= 0.05 * min(q.gather_ms, q.reduce_ms))
            threads = {(e["name"], e["tid"]) for e in ev if lo <= e["ts"] < hi
                       and e["name"] in ("gloo:all_gather", "gloo:all_reduce")}
            assert q.queues == len(q.gather_queues | q.reduce_queues)
            assert len(q.gather_queues) == len({t for n, t in threads if n == "gloo:all_gather"})
            assert len(q.reduce_queues) == len({t for n, t in threads if n == "gloo:all_reduce"})
            assert all(device == -1 for device, _ in q.gather_queues | q.reduce_queues)
            assert q.process_groups == 1
            out = r.sections.parallelism.to_dict()["fsdp_collectives"]
            assert out["serialised"] == q.serialised and out["process_groups"] == 1
    # Without prefetch every all-gather is synchronous: none runs beside a reduction.
    assert all(r.sections.parallelism.fsdp_queues.serialised for r in analyses["fsdp"].ranks)


def _clipped(ev, name: str, lo: float, hi: float) -> list[tuple[float, float]]:
    """The union of the events called ``name``, clipped to [lo, hi)."""
    return union([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in ev
                  if e["name"] == name and e["ts"] < hi and e["ts"] + e["dur"] > lo])


def test_streamed_window_by_window_equals_whole(parallel_jobs):  # noqa: F811
    for job in ("pipeline_heavy", "fsdp_prefetch"):
        trace = load_file(parallel_jobs / job / "rank1.json")
        steps = find_steps(trace)
        whole = parallelism(trace, steps)
        streamed = parallelism.over(windows_of(trace, steps, 1), steps)
        assert streamed.kinds == whole.kinds and streamed.calls == whole.calls
        assert (streamed.pipeline is None) == (whole.pipeline is None)
        if whole.pipeline is not None:
            a_pipe, b_pipe = streamed.pipeline, whole.pipeline
            assert (a_pipe.micro_batches, a_pipe.role) == (b_pipe.micro_batches, b_pipe.role)
            for a, b in zip(a_pipe.per_step, b_pipe.per_step, strict=True):
                assert np.allclose([a.compute_ms, a.p2p_ms, a.p2p_exposed_ms, a.step_ms],
                                   [b.compute_ms, b.p2p_ms, b.p2p_exposed_ms, b.step_ms])
        assert [x.layer for x in streamed.layers] == [x.layer for x in whole.layers]
        assert np.allclose([x.exposed_ms for x in streamed.layers],
                           [x.exposed_ms for x in whole.layers])
        assert [(sorted(x.forward_distances), sorted(x.backward_distances))
                for x in streamed.layers] == [(sorted(x.forward_distances),
                                               sorted(x.backward_distances))
                                              for x in whole.layers]
        if whole.fsdp_queues is not None:
            assert streamed.fsdp_queues.overlap_ms == pytest.approx(whole.fsdp_queues.overlap_ms)
            assert streamed.fsdp_queues.gather_ms == pytest.approx(whole.fsdp_queues.gather_ms)


def test_the_reports_show_it(analyses):
    import io

    from rich.console import Console

    from trainprof.report.html.report import render_html
    from trainprof.report.markdown.report import to_markdown
    from trainprof.report.sections import parallelism, pipeline
    from trainprof.report.sections.view import ViewContext

    heavy, fsdp = analyses["pipeline_heavy"], analyses["fsdp"]
    md = to_markdown(heavy)
    assert "### Parallelism" in md and "| 1 | 1 |" in md
    html = render_html(heavy)
    assert "Pipeline stages" in html and "default_pg" in html
    assert "FSDP layers" in render_html(fsdp)
    console = Console(file=io.StringIO(), width=120)
    console.print(pipeline.text(heavy.job.pipeline, ViewContext()))
    console.print(parallelism.text(fsdp.ranks[0].sections.parallelism, ViewContext()))
    text = console.file.getvalue()
    assert "heaviest" in text and "Parallelism: FSDP" in text and "reduce-scatter" in text


def test_the_recorded_jobs_read_back_from_their_json(analyses, tmp_path):
    """Each job's saved result reads back into the same records (analysis/decode.py): the JSON
    written again equals the JSON read (floats to 1e-9), and its Markdown is the analysis's."""
    from trainprof.report.json import write_json
    from trainprof.report.markdown.report import to_markdown
    from trainprof.report.saved import saved_analysis

    from helpers.round_trip import differences, round_trip

    for job, analysis in analyses.items():
        first, again = round_trip(analysis)
        assert not differences(first, again), job
        saved = saved_analysis(write_json(analysis, tmp_path / f"{job}.json"))
        assert to_markdown(saved) == to_markdown(analysis), job
