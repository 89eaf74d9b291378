"""Tensor and expert parallelism (analysis/parallelism/tensor.py, expert.py, the rules in
diagnose/rules/model_parallel.py): on recorded two-rank gloo jobs (tests/analysis/jobs/
tp_ep_jobs.py: DTensor ColwiseParallel/RowwiseParallel on an MLP, an uneven all_to_all_single)
and on GPU traces built in Kineto's format (tests/helpers/model_parallel_traces.py), each figure checked
against a reference reading of the raw events written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import trainprof
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.parallelism.section import parallelism
from trainprof.analysis.streaming.windows import windows_of
from trainprof.diagnose.engine import diagnose
from trainprof.diagnose.rules.model_parallel import (
    EXPERT_IMBALANCE_PCT,
    TENSOR_PARALLEL_PATH_PCT,
)
from trainprof.trace.load import load_file

from helpers.critical_path_traces import dualpipe_h800
from helpers.model_parallel_traces import ALL_REDUCE, expert_parallel, tensor_parallel
from helpers.parallel_recordings import events, length_inside, profiler_steps, union
from helpers.tp_ep_recordings import tp_ep_jobs  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow  # records a two-rank torch.distributed job (seconds)

FUNCTIONAL = "_c10d_functional::"
A2A = ("c10d::alltoall_base_", "gloo:all_to_all")


@pytest.fixture(scope="module")
def recorded(tp_ep_jobs):  # noqa: F811
    return {job: trainprof.analyze(tp_ep_jobs / job) for job in ("tensor", "expert")}


def _layer_of(e: dict, ev: list[dict]) -> str:
    """The innermost ``layers.i`` annotation around a host op on its thread (reference)."""
    around = [a for a in ev if a["name"].startswith("layers.") and a["tid"] == e["tid"]
              and a["ts"] <= e["ts"] < a["ts"] + a["dur"]]
    if around:
        return min(around, key=lambda a: a["dur"])["name"]
    back = any(a["name"].startswith("autograd::engine::evaluate_function") and
               a["tid"] == e["tid"] and a["ts"] <= e["ts"] < a["ts"] + a["dur"] for a in ev)
    return "(backward)" if back else "(outside layers)"


def test_a_dtensor_job_is_tensor_parallel_and_its_layers_measured(recorded, tp_ep_jobs):  # noqa: F811
    for r in recorded["tensor"].ranks:
        p = r.sections.parallelism
        assert p.kinds == ["tensor"], p.evidence  # its backward all-reduces are not DDP's
        ev = events(tp_ep_jobs / "tensor" / f"rank{r.rank}.json")
        steps = profiler_steps(ev)
        lo, hi = steps[0][0], steps[-1][1]
        ops = [e for e in ev if e["cat"] == "cpu_op" and e["name"].startswith(FUNCTIONAL)
               and lo <= e["ts"] < hi]
        by_layer: dict[str, list] = {}
        for e in ops:
            by_layer.setdefault(_layer_of(e, ev), []).append(e)
        got = {x.layer: x for x in p.tensor.layers}
        assert set(got) == set(by_layer)
        n = len(steps)  # the figures are per step
        for name, mine in by_layer.items():
            spans = union([(e["ts"], e["ts"] + e["dur"]) for e in mine])
            assert got[name].comm_ms * n * 1000 == pytest.approx(length_inside(spans, lo, hi),
                                                                 abs=0.5)
            issued = sum(e["name"] == FUNCTIONAL + "all_reduce" for e in mine)
            assert got[name].calls_per_step * n == pytest.approx(issued)
        # 3 blocks: each all-reduces its output in forward and its input's gradient in backward
        assert sum(x.calls_per_step for x in p.tensor.layers) == pytest.approx(6)


def test_the_collectives_on_the_critical_path(recorded, tp_ep_jobs):  # noqa: F811
    for in_folder in recorded["tensor"].ranks:
        # One trace analysed alone keeps every piece of its path (a folder's ranks keep the
        # longest only, after the collectives met the whole path: the same figure).
        r = trainprof.analyze(tp_ep_jobs / "tensor" / f"rank{in_folder.rank}.json").ranks[0]
        tp, path = r.sections.parallelism.tensor, r.sections.critical_path
        assert in_folder.sections.parallelism.tensor.on_path_ms == pytest.approx(tp.on_path_ms)
        ev = events(tp_ep_jobs / "tensor" / f"rank{r.rank}.json")
        # Reference: the path's pieces on each thread's lane met with that thread's functional
        # ops (times from the trace's t0, as the path's; the JSON's ts count from its
        # baseTimeNanoseconds).
        path_json = tp_ep_jobs / "tensor" / f"rank{r.rank}.json"
        base = json.loads(path_json.read_text()).get("baseTimeNanoseconds", 0) / 1000.0
        first = load_file(path_json).t0_us - base
        lanes: dict[str, list] = {}
        for e in ev:
            if e["name"].startswith(FUNCTIONAL):
                lanes.setdefault(f"host thread {e['tid']}", []).append(
                    (e["ts"] - first, e["ts"] + e["dur"] - first))
        spans = {lane: union(x) for lane, x in lanes.items()}
        expected = 0.0
        for step in path.steps:
            for piece in (step.pieces.piece(i) for i in range(len(step.pieces))):
                expected += length_inside(spans.get(piece.lane, []), piece.start_us,
                                          piece.end_us)
        k = tp.path_steps * 1000.0  # the figures are per step of the path
        assert tp.path_steps == len(path.steps)
        assert tp.on_path_ms * k == pytest.approx(expected, rel=0.01)
        assert tp.path_ms * k == pytest.approx(sum(s.step_us for s in path.steps))
        n = r.sections.parallelism.steps * 1000.0
        assert tp.on_path_ms * k <= tp.comm_ms * n + 1.0


def test_an_uneven_all_to_all_costs_the_light_rank(recorded, tp_ep_jobs):  # noqa: F811
    job = recorded["expert"]
    per_rank = {}
    for r in job.ranks:
        assert r.sections.parallelism.kinds == ["expert"]
        ev = events(tp_ep_jobs / "expert" / f"rank{r.rank}.json")
        steps = profiler_steps(ev)
        spans = union([(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] in A2A])
        per_rank[r.rank] = length_inside(spans, steps[0][0], steps[-1][1]) / len(steps) / 1000
        e = r.sections.parallelism.expert
        assert e.calls_per_step == 2  # dispatch and combine
    balance = job.job.experts
    got = {x.rank: x.all_to_all_ms for x in balance.ranks}
    assert got == pytest.approx(per_rank, abs=1e-3)
    mean = np.mean(list(per_rank.values()))
    assert balance.imbalance_ms == pytest.approx(max(per_rank.values()) - mean, abs=1e-3)
    # rank 1's experts receive 4x the tokens: rank 0 waits for it, rank 1 is the overloaded one
    assert (balance.slowest.rank, balance.overloaded.rank) == (0, 1)
    # The construction: rank 0 waits in the combine for rank 1's extra expert compute, so the
    # spread over the mean is half the difference of their experts' time (ops in the JSON).
    compute = {}
    for r in job.ranks:
        ev = events(tp_ep_jobs / "expert" / f"rank{r.rank}.json")
        steps = profiler_steps(ev)
        compute[r.rank] = sum(e["dur"] for e in ev if e["name"] in ("aten::matmul", "aten::relu")
                              and any(s <= e["ts"] < t for s, t in steps)) / len(steps) / 1000
    implied = (compute[1] - compute[0]) / 2
    assert balance.imbalance_ms == pytest.approx(implied, rel=0.3)
    assert balance.imbalance_pct > EXPERT_IMBALANCE_PCT
    found = {f.id: f for f in diagnose(job)}
    assert found["expert_imbalance"].rank == 1
    assert found["expert_imbalance"].saving_ms == pytest.approx(balance.imbalance_ms)


def test_streamed_window_by_window_equals_whole(tp_ep_jobs):  # noqa: F811
    for job in ("tensor", "expert"):
        trace = load_file(tp_ep_jobs / job / "rank0.json")
        steps = find_steps(trace)
        whole = parallelism(trace, steps)
        streamed = parallelism.over(windows_of(trace, steps, 1), steps)
        assert streamed.kinds == whole.kinds
        if job == "tensor":
            a, b = streamed.tensor, whole.tensor
            assert [x.layer for x in a.layers] == [x.layer for x in b.layers]
            assert np.allclose([(x.calls_per_step, x.comm_ms, x.exposed_ms) for x in a.layers],
                               [(x.calls_per_step, x.comm_ms, x.exposed_ms) for x in b.layers])
            assert sorted(a.spans.start_us) == sorted(b.spans.start_us)
        else:
            a2, b2 = streamed.expert, whole.expert
            assert (a2.calls_per_step, a2.all_to_all_ms, a2.exposed_ms) == \
                pytest.approx((b2.calls_per_step, b2.all_to_all_ms, b2.exposed_ms))


def _gpu_tp(tmp_path: Path, gemm_us: float, reduce_us: float):
    sim = tensor_parallel(gemm_us, reduce_us)
    a = trainprof.analyze(sim.b.write(tmp_path / f"tp_{gemm_us:.0f}.json"))
    return sim, a


def test_gpu_tp_all_reduces_on_the_path_are_found(tmp_path):
    sim, a = _gpu_tp(tmp_path, 300.0, 400.0)
    r = a.ranks[0]
    tp = r.sections.parallelism.tensor
    assert r.sections.parallelism.kinds == ["tensor"]
    assert [x.layer for x in tp.layers] == [f"layers.{i}" for i in range(4)]
    assert all(x.calls_per_step == 1 for x in tp.layers)  # one all-reduce per layer, 3 steps
    # Reference: the stream is the path (the host runs ahead, the kernels back to back), so
    # the all-reduces' share of it is their time over each step's kernels' span.
    reduce_us = sum(o.end - o.start for o in sim.ops if o.name == ALL_REDUCE)
    path_us = sum(max(o.end for o in ops) - min(o.start for o in ops) for ops in sim.step_ops)
    assert tp.on_path_ms * tp.path_steps * 1000 == pytest.approx(reduce_us, rel=0.01)
    assert tp.on_path_pct == pytest.approx(100.0 * reduce_us / path_us, rel=0.03)
    steps = r.sections.parallelism.steps  # on the compute stream:
    assert tp.exposed_ms * steps * 1000 == pytest.approx(reduce_us, rel=0.01)
    found = {f.id: f for f in diagnose(a)}
    f = found["tensor_parallel_communication"]
    assert f.saving_pct == pytest.approx(tp.on_path_pct, rel=0.05)
    assert "sequence parallel" in f.fix.summary.lower()
    # the same time as communication_exposed: one of the two is counted, the other names it
    shared = {g.id: g.extra.get("saving_shared_with") for g in found.values()}
    assert {shared["communication_exposed"], shared["tensor_parallel_communication"]} in \
        ({None, "communication_exposed"}, {None, "tensor_parallel_communication"})


def test_gpu_tp_streamed_equals_in_memory(tmp_path):
    from trainprof.analysis.streaming.streamed import analyze_streamed

    sim = tensor_parallel(300.0, 400.0)
    path = sim.b.write(tmp_path / "tp.json")
    whole = trainprof.analyze(path).ranks[0].sections.parallelism.tensor
    streamed = analyze_streamed(path, steps_per_window=1).sections.parallelism.tensor
    assert streamed.on_path_ms == pytest.approx(whole.on_path_ms, rel=1e-6)
    assert streamed.path_ms == pytest.approx(whole.path_ms, rel=1e-6)
    assert [(x.layer, x.calls_per_step) for x in streamed.layers] == \
        [(x.layer, x.calls_per_step) for x in whole.layers]
    assert streamed.comm_ms == pytest.approx(whole.comm_ms, rel=1e-6)


def test_gpu_tp_small_all_reduces_get_no_finding(tmp_path):
    _, a = _gpu_tp(tmp_path, 2000.0, 60.0)
    tp = a.ranks[0].sections.parallelism.tensor
    assert tp.on_path_pct < TENSOR_PARALLEL_PATH_PCT
    assert "tensor_parallel_communication" not in {f.id for f in diagnose(a)}


def _gpu_ep(tmp_path: Path, loads: list[float]):
    ranks = expert_parallel(loads)
    folder = tmp_path / ("ep_" + "_".join(f"{x:g}" for x in loads))
    for i, er in enumerate(ranks):
        er.builder.write(folder / f"rank{i}.json")
    return ranks, trainprof.analyze(folder)


def test_gpu_expert_imbalance_is_found(tmp_path):
    ranks, a = _gpu_ep(tmp_path, [1, 1, 1, 3])
    balance = a.job.experts
    # Reference: each rank's DeepEP kernels per step, the spread over the mean.
    per_rank = [sum(e - s for s, e in er.all_to_all) / len(er.steps) / 1000 for er in ranks]
    assert [x.all_to_all_ms for x in balance.ranks] == pytest.approx(per_rank)
    assert balance.imbalance_ms == pytest.approx(max(per_rank) - np.mean(per_rank))
    assert balance.overloaded.rank == 3 and balance.hidden_pct == pytest.approx(0.0)
    f = next(f for f in diagnose(a) if f.id == "expert_imbalance")
    assert f.rank == 3
    step_ms = np.mean([e - s for s, e in ranks[0].steps]) / 1000
    assert f.saving_ms == pytest.approx(balance.imbalance_ms)
    assert balance.imbalance_pct == pytest.approx(100 * balance.imbalance_ms / step_ms, rel=0.05)
    assert "load-balancing" in f.fix.summary
    # The light ranks' exposed all-to-all: the overlap fix for experts, not DDP's buckets.
    exposed = [g for g in diagnose(a) if g.id == "communication_exposed"]
    assert exposed and all("DualPipe" in g.fix.summary and "bucket" not in g.fix.summary
                           for g in exposed)


def test_nccl_all_to_all_runs_as_send_recv_kernels(tmp_path):
    ranks = expert_parallel([1, 3], nccl=True)
    for i, er in enumerate(ranks):
        er.builder.write(tmp_path / "nccl" / f"rank{i}.json")
    a = trainprof.analyze(tmp_path / "nccl")
    for r, er in zip(a.ranks, ranks, strict=True):
        p = r.sections.parallelism
        assert p.kinds == ["expert"]  # the SendRecv kernels are not a pipeline
        expected = sum(e - s for s, e in er.all_to_all) / len(er.steps) / 1000
        assert p.expert.all_to_all_ms == pytest.approx(expected)
    assert a.job.experts.overloaded.rank == 1


def test_gpu_balanced_experts_get_no_finding(tmp_path):
    _, a = _gpu_ep(tmp_path, [2, 2, 2, 2])
    assert a.job.experts.imbalance_ms == pytest.approx(0.0, abs=1e-6)
    assert "expert_imbalance" not in {f.id for f in diagnose(a)}


def test_dualpipe_overlap_is_said(tmp_path):
    ranks = expert_parallel([2, 2], overlap=True)
    for i, er in enumerate(ranks):
        er.builder.write(tmp_path / "dualpipe" / f"rank{i}.json")
    a = trainprof.analyze(tmp_path / "dualpipe")
    # Reference: the DeepEP kernels (stream 20) beside the experts' GEMMs (stream 7).
    er = ranks[0]
    a2a, gemms = union(er.all_to_all), union(er.compute)
    hidden = sum(length_inside(gemms, s, e) for s, e in a2a)
    expected = 100 * hidden / sum(e - s for s, e in a2a)
    e = a.ranks[0].sections.parallelism.expert
    assert e.hidden_pct == pytest.approx(expected, abs=0.5) and expected > 50
    assert any("DualPipe" in n for n in a.job.experts.notes)
    assert "expert_imbalance" not in {f.id for f in diagnose(a)}


def test_one_expert_rank_and_no_overlap(tmp_path):
    sim = dualpipe_h800()  # its all-to-all waits for compute and compute for it: no overlap
    a = trainprof.analyze(sim.b.write(tmp_path / "dualpipe.json"))
    assert a.ranks[0].sections.parallelism.expert.hidden_pct == pytest.approx(0.0, abs=0.5)
    notes = a.job.experts.notes
    assert not any("DualPipe" in n for n in notes)
    assert any("One expert-parallel rank" in n for n in notes)


def test_the_reports_show_it(tmp_path):
    import io

    from rich.console import Console

    from trainprof.report.html.report import render_html
    from trainprof.report.markdown.report import to_markdown
    from trainprof.report.terminal.report import print_analysis

    _, tp = _gpu_tp(tmp_path, 300.0, 400.0)
    _, ep = _gpu_ep(tmp_path, [1, 1, 1, 3])
    share = tp.ranks[0].sections.parallelism.tensor.on_path_pct
    for a, says in ((tp, f"Tensor-parallel collectives by layer: {share:.1f}%"),
                    (ep, "Expert parallelism: all-to-all")):
        out = io.StringIO()
        print_analysis(a, Console(file=out, width=160))
        assert says in out.getvalue()
        assert says in to_markdown(a)
    assert "layers.3" in to_markdown(tp)
    assert f"Tensor-parallel collectives by layer: {share:.1f}%" in render_html(tp.to_dict())
    assert "Expert parallelism: all-to-all per rank" in render_html(ep.to_dict())
    experts = ep.to_dict()["job"]["experts"]
    assert experts["overloaded_rank"] == 3 and len(experts["ranks"]) == 4
