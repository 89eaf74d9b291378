"""The parallelism findings on recorded two-rank gloo jobs (tests/analysis/jobs/
parallel_jobs.py): an unbalanced 2-stage pipeline, its balanced control, an FSDP2 job; the
savings against what the construction implies; the communication fix fits the parallelism;
and communication_exposed's fix chosen from synthetic ranks of each kind."""

from __future__ import annotations

import statistics

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
from trainprof.diagnose.engine import diagnose
from trainprof.diagnose.rules import parallelism as rules

PARALLEL_IDS = {"pipeline_imbalance", "pipeline_bubble", "fsdp_exposed_communication"}
#: The construction: 2 stages, 4 micro-batches; stage 0 holds 2 equal layers, stage 1 holds 8.
STAGES, MICRO, LIGHT, HEAVY = 2, 4, 2, 8


@pytest.fixture(scope="module")
def found(parallel_jobs):  # noqa: F811
    out = {}
    for job in ("pipeline_heavy", "pipeline_balanced", "fsdp"):
        analysis = trainprof.analyze(parallel_jobs / job)
        out[job] = (analysis, diagnose(analysis))
    return out


def _heavy_compute_ms(parallel_jobs) -> float:  # noqa: F811
    """Stage 1's median compute per step, read from its raw trace."""
    ev = events(parallel_jobs / "pipeline_heavy" / "rank1.json")
    compute = cpu_compute(ev)
    return statistics.median(length_inside(compute, lo, hi) for lo, hi in profiler_steps(ev)) \
        / 1000.0


@pytest.mark.slow
def test_the_unbalanced_pipeline_names_its_heavy_stage(found, parallel_jobs):  # noqa: F811
    _, findings = found["pipeline_heavy"]
    top = findings[0]
    assert top.id == "pipeline_imbalance", [(f.id, f.saving_pct) for f in findings]
    assert (top.rank, top.extra["stage"]) == (1, 1)
    assert "stage 1" in top.title and "to stage 0" in top.fix.summary
    # Balanced, each stage holds (LIGHT + HEAVY) / 2 layers: stage 1 sheds 3/8 of its work, and
    # a GPipe step is (M + S - 1) / M of the slowest stage's compute.
    implied = (HEAVY - (LIGHT + HEAVY) / 2) / HEAVY * _heavy_compute_ms(parallel_jobs) \
        * (MICRO + STAGES - 1) / MICRO
    assert top.saving_ms == pytest.approx(implied, rel=0.30)
    bubble = next(f for f in findings if f.id == "pipeline_bubble")
    assert bubble.saving_ms == pytest.approx(
        (STAGES - 1) / MICRO * _heavy_compute_ms(parallel_jobs), rel=1e-6)
    assert all("DDP" not in f.fix.summary for f in findings)
    # Its only communication is the stages' send/recv: the pipeline findings count it.
    assert "communication_exposed" not in {f.id for f in findings}


@pytest.mark.slow
def test_the_balanced_pipeline_has_no_parallelism_finding(found):
    analysis, findings = found["pipeline_balanced"]
    # Nor a straggler: a stage waiting in recv for the one before it is the schedule (sends and
    # receives are not matched across ranks as collectives), nor work "outside the training
    # phases": the schedule's sends and receives are the training step.
    quiet = PARALLEL_IDS | {"straggler", "outside_training"}
    assert not quiet & {f.id for f in findings}, [(f.id, f.title) for f in findings]
    assert analysis.job.stragglers.matched == 0  # the job has only sends and receives
    assert all("DDP" not in f.fix.summary for f in findings)


@pytest.mark.slow
def test_fsdp_exposed_communication_names_the_layer(found, parallel_jobs):  # noqa: F811
    analysis, findings = found["fsdp"]
    f = next(f for f in findings if f.id == "fsdp_exposed_communication")
    r = next(r for r in analysis.ranks if r.rank == f.rank)
    ev = events(parallel_jobs / "fsdp" / f"rank{f.rank}.json")
    waiting = minus(comm_spans(ev), cpu_compute(ev))
    steps = profiler_steps(ev)
    hooks = [e for e in ev if e["name"].startswith(("FSDP::pre_", "FSDP::post_backward"))
             and steps[0][0] <= e["ts"] < steps[-1][1]]
    per_layer: dict[str, float] = {}
    for e in hooks:
        layer = e["name"].rsplit("(", 1)[1].rstrip(")")
        per_layer[layer] = per_layer.get(layer, 0.0) + length_inside(
            waiting, e["ts"], min(e["ts"] + e["dur"], steps[-1][1]))
    worst = max(per_layer, key=per_layer.__getitem__)
    assert f.extra["layer"] == worst
    assert f"layer {worst}" in f.title
    exposed_ms = sum(x.exposed_us for x in r.sections.parallelism.layers) / len(steps) / 1000
    assert f.evidence[0].value == pytest.approx(exposed_ms)
    assert "prefetch" in f.fix.pytorch or "fully_shard" in f.fix.pytorch
    assert all("DDP" not in x.fix.summary for x in findings)


def test_the_communication_fix_fits_the_parallelism(builder, tmp_path):
    """A rank's kinds pick communication_exposed's fix: DDP advice only for DDP."""
    from trainprof.analysis.parallelism.result import LayerComm, Parallelism

    def kinds_fix(kinds: list[str], calls: dict[str, int], layers=()) -> object:
        p = Parallelism(kinds=kinds, evidence={}, calls=calls, process_groups=[], steps=1,
                        layers=list(layers))
        r = trainprof.analyze(_one_step(builder, tmp_path)).ranks[0]
        r.sections.parallelism = p
        return rules.comm_fix(r)

    assert kinds_fix(["ddp"], {"all_reduce": 4}) is None  # the DDP advice stays
    assert kinds_fix([], {"all_reduce": 4}) is None
    assert kinds_fix(["tensor"], {"all_reduce": 4}) is rules.TENSOR_PARALLEL_COMM
    assert kinds_fix(["expert"], {"all_to_all": 4}) is rules.EXPERT_PARALLEL_COMM
    assert kinds_fix(["pipeline"], {"send": 4}) is rules.PIPELINE_COMM
    assert kinds_fix([], {"broadcast": 1}) is rules.GENERIC_COMM
    backward = LayerComm("layers.0", forward_gather_us=1.0, backward_gather_us=5.0)
    assert kinds_fix(["fsdp"], {"all_gather": 2}, [backward]) is \
        rules.FSDP_FIXES["backward_gather_us"]


def _one_step(builder, tmp_path):
    builder.step(0, 0, 1000)
    builder.op("aten::mm", 10, 500)
    path = tmp_path / "one.json"
    builder.write(path)
    return path
