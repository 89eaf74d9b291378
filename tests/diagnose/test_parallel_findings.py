"""The parallelism findings on recorded two-rank gloo jobs (tests/analysis/jobs/
parallel_jobs.py): an unbalanced 2-stage pipeline, its balanced control, the balanced pipeline
fed too few micro-batches, FSDP2 without prefetch and its control with prefetch, a slow rank
under FSDP2; the savings against what the construction implies; the communication fix fits the
parallelism; and communication_exposed's fix chosen from synthetic ranks of each kind."""

from __future__ import annotations

import statistics

import pytest

import trainprof
from trainprof.diagnose.engine import diagnose
from trainprof.diagnose.rules import parallelism as rules
from trainprof.diagnose.rules.common import straggler_waits

from helpers.parallel_recordings import (
    cpu_compute,
    events,
    fsdp_waits,
    length_inside,
    minus,
    parallel_jobs,  # noqa: F401 (a fixture)
    profiler_steps,
    union,
)

PARALLEL_IDS = {"pipeline_imbalance", "pipeline_bubble", "fsdp_exposed_communication"}
#: The construction: 2 stages, 4 micro-batches; stage 0 holds 2 equal layers, stage 1 holds 8.
STAGES, MICRO = 2, 4
#: The balanced control's micro-batches.
BALANCED_MICRO = 8
#: pipeline_few's micro-batches; fsdp_slow_rank's slow rank and its delay a step.
FEW_MICRO, SLOW_RANK, SLOW_DELAY_MS = 2, 1, 300.0


@pytest.fixture(scope="module")
def found(parallel_jobs):  # noqa: F811
    out = {}
    for job in ("pipeline_heavy", "pipeline_balanced", "pipeline_few", "fsdp", "fsdp_prefetch",
                "fsdp_slow_rank"):
        analysis = trainprof.analyze(parallel_jobs / job)
        out[job] = (analysis, diagnose(analysis))
    return out


def _stage_compute_ms(parallel_jobs, rank: int, job: str = "pipeline_heavy"  # noqa: F811
                      ) -> float:
    """A stage's median compute per step, read from its raw trace."""
    ev = events(parallel_jobs / job / f"rank{rank}.json")
    compute = cpu_compute(ev)
    return statistics.median(length_inside(compute, lo, hi) for lo, hi in profiler_steps(ev)) \
        / 1000.0


def _stage_step_ms(parallel_jobs, rank: int, job: str) -> float:  # noqa: F811
    ev = events(parallel_jobs / job / f"rank{rank}.json")
    return statistics.median(hi - lo for lo, hi in profiler_steps(ev)) / 1000.0


@pytest.mark.slow
def test_the_unbalanced_pipeline_names_its_heavy_stage(found, parallel_jobs):  # noqa: F811
    _, findings = found["pipeline_heavy"]
    top = findings[0]
    assert top.id == "pipeline_imbalance", [(f.id, f.saving_pct) for f in findings]
    assert (top.rank, top.extra["stage"]) == (1, 1)
    assert "stage 1" in top.title and "to stage 0" in top.fix.summary
    # Balanced, both stages compute the mean of the two; a GPipe step is (M + S - 1) / M of the
    # slowest stage's compute. Read from the raw traces:
    c0, c1 = (_stage_compute_ms(parallel_jobs, rank) for rank in (0, 1))
    assert top.saving_ms == pytest.approx((MICRO + STAGES - 1) / MICRO * (c1 - (c0 + c1) / 2),
                                          rel=1e-3)
    # The construction alone does not give the figure: stage 1 holds 4x stage 0's layers, but
    # stage 0 also runs the schedule's own work, and on 2 shared cores one stage's compute
    # stretches apart from the other's: c1 / c0 measured 3.0 to 4.4 alone, 1.71 in a CI run.
    assert top.saving_ms > 0 and c1 / c0 > 1.4
    bubble = next(f for f in findings if f.id == "pipeline_bubble")
    assert bubble.saving_ms == pytest.approx(
        (STAGES - 1) / MICRO * c1, rel=1e-6)
    assert all("DDP" not in f.fix.summary for f in findings)
    # Its only communication is the stages' send/recv: the pipeline findings count it.
    assert "communication_exposed" not in {f.id for f in findings}


@pytest.mark.slow
def test_the_balanced_pipeline_has_no_parallelism_finding(found, parallel_jobs):  # noqa: F811
    analysis, findings = found["pipeline_balanced"]
    ids = {f.id for f in findings}
    # The split is even by construction, but on 2 shared cores one stage's compute has come out
    # 1.33x the other's in a recording alone (the other run: 0.97x): whether the imbalance
    # finding fires is checked against what the raw traces measured, with the rule's threshold.
    computes = [_stage_compute_ms(parallel_jobs, r, "pipeline_balanced") for r in (0, 1)]
    step = statistics.median(_stage_step_ms(parallel_jobs, r, "pipeline_balanced")
                             for r in (0, 1))
    m = BALANCED_MICRO
    measured = (m + STAGES - 1) / m * (max(computes) - statistics.mean(computes)) / step * 100
    assert ("pipeline_imbalance" in ids) == (measured >= rules.PIPELINE_IMBALANCE_PCT), \
        (computes, step, measured)
    # Nor a straggler: a stage waiting in recv for the one before it is the schedule (sends and
    # receives are not matched across ranks as collectives), nor work "outside the training
    # phases": the schedule's sends and receives are the training step.
    quiet = (PARALLEL_IDS - {"pipeline_imbalance"}) | {"straggler", "outside_training"}
    assert not quiet & ids, [(f.id, f.title) for f in findings]
    assert analysis.job.stragglers.matched == 0  # the job has only sends and receives
    assert all("DDP" not in f.fix.summary for f in findings)


@pytest.mark.slow
def test_too_few_micro_batches_is_a_bubble(found, parallel_jobs):  # noqa: F811
    _, findings = found["pipeline_few"]
    top = findings[0]
    assert top.id == "pipeline_bubble", [(f.id, f.saving_pct) for f in findings]
    micro = FEW_MICRO
    assert f"{micro} micro-batches for 2 stages" in top.title
    # The construction: 2 balanced stages, M micro-batches; a GPipe step lasts M + S - 1
    # micro-batch times of the slowest stage, S - 1 of them the bubble, a micro-batch time
    # being the stage's compute per step / M (read from each stage's raw trace).
    computes, idle = [], []
    for rank in (0, 1):
        ev = events(parallel_jobs / "pipeline_few" / f"rank{rank}.json")
        compute = cpu_compute(ev)
        steps = profiler_steps(ev)
        computes.append(statistics.median(length_inside(compute, lo, hi) for lo, hi in steps))
        idle.append(statistics.median(1 - length_inside(compute, lo, hi) / (hi - lo)
                                      for lo, hi in steps))
    assert top.saving_ms == pytest.approx((STAGES - 1) / micro * max(computes) / 1e3, rel=1e-6)
    # The bubble is there: each stage idles at least the schedule's (S - 1) / (M + S - 1) of
    # its step, within 30% (more on a loaded host, where the transfers stretch the step).
    assert min(idle) > 0.7 * (STAGES - 1) / (micro + STAGES - 1)
    assert "micro-batches" in top.fix.summary


def _prefetchable_waits_ms(parallel_jobs, job: str) -> float:  # noqa: F811
    """The ranks' mean waiting per step, from the raw JSON, for the all-gathers a prefetch can
    hide: in forward every layer's but the first's (0), in backward every layer's but the
    first's of backward (4: its all-gather follows the forward with nothing to run beside)."""
    per_rank = []
    for rank in (0, 1):
        ev = events(parallel_jobs / job / f"rank{rank}.json")
        waits = fsdp_waits(ev)
        per_rank.append(sum(v for (layer, figure), v in waits.items()
                            if (figure, layer) not in (("forward", "0"), ("backward", "4"))
                            and figure != "reduce") / len(profiler_steps(ev)) / 1000.0)
    return statistics.mean(per_rank)


@pytest.mark.slow
def test_fsdp_without_prefetch(found, parallel_jobs):  # noqa: F811
    analysis, findings = found["fsdp"]
    ids = [(x.id, x.saving_pct) for x in findings]
    f = next((x for x in findings if x.id == "fsdp_exposed_communication"), None)
    assert f is not None, ids
    # The costliest, unless one rank ran late in this recording (a shared core slowed it):
    # then only the straggler finding, or a finding on that rank, may cost more.
    ahead = findings[:findings.index(f)]
    late = analysis.job.stragglers.straggler if analysis.job.stragglers else None
    assert all(late is not None and (x.id == "straggler" or x.rank == late)
               for x in ahead), ids
    assert f.extra["cause"] == "no_forward_prefetch"
    assert "set_modules_to_forward_prefetch" in f.fix.pytorch
    ev = events(parallel_jobs / "fsdp" / f"rank{f.rank}.json")
    waits = fsdp_waits(ev)
    steps = len(profiler_steps(ev))
    # The layers named: those whose forward all-gathers the step waited for most.
    forward = {layer: v for (layer, figure), v in waits.items() if figure == "forward"}
    assert f.extra["layers"] == sorted(forward, key=lambda x: -forward[x])[:3]
    assert f.extra["layer"] == max(forward, key=forward.__getitem__)
    p = next(r for r in analysis.ranks if r.rank == f.rank).sections.parallelism
    assert all(x.forward_prefetch_distance == 0 for x in p.layers if x.layer)
    # The saving: every FSDP wait of the rank, layers' and root's, read from the raw trace
    # (less a wait for a straggler, were one named).
    waited = straggler_waits(analysis).get(f.rank, 0.0)
    assert f.saving_ms == pytest.approx(max(sum(waits.values()) / steps / 1000.0 - waited, 0),
                                        rel=1e-6, abs=1e-3)
    assert f.evidence[0].value == pytest.approx(f.saving_ms)
    assert all("DDP" not in x.fix.summary for x in findings)


@pytest.mark.slow
def test_fsdp_with_prefetch_waits_less(found, parallel_jobs):  # noqa: F811
    """The control: the same model with each all-gather prefetched a layer ahead (and
    asynchronous, which on CPU is what lets gloo overlap it) waits less for the all-gathers a
    prefetch can hide (0.43-0.72x as long in seven recordings at load averages of 1 to 9, 0.9x
    once at 9: gloo's thread needs a free core), and what is left is not blamed on a missing
    prefetch."""
    without, with_ = (_prefetchable_waits_ms(parallel_jobs, job)
                      for job in ("fsdp", "fsdp_prefetch"))
    assert with_ < without, (with_, without)
    _, findings = found["fsdp_prefetch"]
    mine = [f for f in findings if f.id == "fsdp_exposed_communication"]
    assert all(f.extra["cause"] not in ("no_forward_prefetch", "no_backward_prefetch")
               for f in mine)


@pytest.mark.slow
def test_a_slow_rank_under_fsdp(found, parallel_jobs):  # noqa: F811
    _, findings = found["fsdp_slow_rank"]
    top = findings[0]
    assert (top.id, top.rank) == ("straggler", SLOW_RANK), \
        [(f.id, f.rank, f.saving_pct) for f in findings]
    # The delay as the slow rank's trace records it (its slow_rank_delay ranges per step).
    ev = events(parallel_jobs / "fsdp_slow_rank" / f"rank{SLOW_RANK}.json")
    steps = profiler_steps(ev)
    delays = [sum(e["dur"] for e in ev if e["name"] == "slow_rank_delay" and lo <= e["ts"] < hi)
              for lo, hi in steps]
    delay_ms = statistics.median(delays) / 1000.0
    assert delay_ms == pytest.approx(SLOW_DELAY_MS, rel=0.2)
    assert top.saving_ms == pytest.approx(delay_ms, rel=0.30)
    # The other rank's wait for it is the straggler's, not FSDP's exposed communication.
    other = [f for f in findings if f.id == "fsdp_exposed_communication"
             and f.rank != SLOW_RANK]
    assert all(f.saving_pct < top.saving_pct for f in other)
    assert all(any(e.label == "left out: waiting for the straggler" for e in f.evidence)
               for f in other)


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
    backward = LayerComm("layers.0", forward_gather_ms=1.0, backward_gather_ms=5.0,
                         forward_distances=[1], backward_distances=[0])
    assert kinds_fix(["fsdp"], {"all_gather": 2}, [backward]) is \
        rules.FSDP_FIXES["no_backward_prefetch"]


def _one_step(builder, tmp_path):
    builder.step(0, 0, 1000)
    builder.op("aten::mm", 10, 500)
    path = tmp_path / "one.json"
    builder.write(path)
    return path


@pytest.mark.slow
def test_a_cluster_summary_gives_the_fsdp_finding_of_the_traces(found, parallel_jobs,  # noqa: F811
                                                                 tmp_path):
    """A cluster summary keeps each rank's parallelism section: the job read from
    ``cluster_summary.json`` gets the FSDP finding the traces give, on the same rank, with the
    same cause and saving (a named straggler's wait left out alike)."""
    from trainprof.analysis.job.cluster_file import RankEntry
    from trainprof.cluster_summary import cluster_document, summarize_traces, write_cluster_summary

    for job in ("fsdp", "fsdp_slow_rank"):
        entries = [RankEntry(rank=r, summaries=summarize_traces(
            [parallel_jobs / job / f"rank{r}.json"], rank=r)) for r in (0, 1)]
        path = write_cluster_summary(tmp_path / job, cluster_document(entries, 2))
        kept = [(f.rank, f.extra["cause"], round(f.saving_pct, 1))
                for f in diagnose(trainprof.analyze(path)) if f.id == "fsdp_exposed_communication"]
        _, findings = found[job]
        mine = [(f.rank, f.extra["cause"], round(f.saving_pct, 1))
                for f in findings if f.id == "fsdp_exposed_communication"]
        assert kept == mine, job
        assert kept or job == "fsdp_slow_rank", job  # the pathology's finding is there


def test_the_fsdp_fix_fits_what_was_seen():
    """fsdp_cause on ranks built by hand (docs/rules.md, fsdp-exposed-communication)."""
    from trainprof.analysis.parallelism.result import FsdpQueues, LayerComm, Parallelism

    def cause(layers, queues=None) -> str:
        p = Parallelism(kinds=["fsdp"], evidence={}, calls={}, process_groups=[], steps=1,
                        layers=layers, fsdp_queues=queues)
        return rules.fsdp_cause(p)[0]

    def layer(fwd=0.0, bwd=0.0, rs=0.0, fd=(1,), bd=(1,), gathers=2) -> LayerComm:
        return LayerComm("l", forward_gather_ms=fwd, backward_gather_ms=bwd,
                         reduce_scatter_ms=rs, gathers_per_step=gathers,
                         forward_distances=list(fd), backward_distances=list(bd))

    one_queue = FsdpQueues(queues=1, shared_queues=1, gather_ms=0.9, reduce_ms=0.5)
    both_at_once = FsdpQueues(queues=2, gather_ms=0.9, reduce_ms=0.5,
                              overlap_ms=0.1)  # 20% of the reductions' time
    assert cause([layer(rs=5.0, fwd=1.0)], one_queue) == "serialised"
    assert cause([layer(rs=5.0, fwd=1.0)], both_at_once) == "reduce_scatter"
    # Forward never prefetched, 20% of the all-gather waits: prefetch it (10% is enough).
    assert cause([layer(fwd=2.0, bwd=8.0, fd=(0,))], one_queue) == "no_forward_prefetch"
    assert cause([layer(fwd=0.5, bwd=9.5, fd=(0,), bd=(1, 0))], one_queue) == "gathered_again"
    assert cause([layer(fwd=6.0, bwd=4.0)], one_queue) == "slow_gathers"
    # 50 µs an all-gather (900 µs over 18): latency-bound, coarser units.
    assert cause([layer(fwd=6.0, bwd=4.0, gathers=18)], one_queue) == "small_units"
    assert cause([]) == "no_forward_prefetch"
    assert one_queue.serialised and both_at_once.serialised is False


#: A GPU FSDP2 step in Kineto's format (tests/helpers/tracegen.py; kernel names as NCCL 2.2x writes
#: them in torch 2.x traces): LAYERS layers, each GEMM_US of forward GEMM and twice that in
#: backward on stream 7, the all-gathers on stream 8 and the reduce-scatters on stream 9, as
#: FSDP2 puts them on their own streams.
LAYERS, GEMM_US, GATHER_US, REDUCE_US = 8, 400.0, 150.0, 150.0
AG_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS_KERNEL = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32"


def gpu_fsdp_step(path, prefetch: bool):
    """One step of the GPU FSDP2 job: with ``prefetch``, each layer's all-gather runs beside the
    GEMM of the layer before it (forward_prefetch / backward_prefetch ranges around it, as
    torch 2.13's _fsdp_param_group.py nests them) and each reduce-scatter beside the next
    backward GEMM; without, each all-gather runs just before its layer's GEMM, alone.
    Returns (compute spans, communication spans) on the device, for the reference reading."""
    from helpers.tracegen import TraceBuilder

    b = TraceBuilder()
    compute, comm = [], []
    host, device = 0.0, 100.0

    def kernel(name: str, stream: int, k_ts: float, k_dur: float) -> None:
        nonlocal host
        b.stream = stream
        b.launch(host, 2, name=name, k_ts=k_ts, k_dur=k_dur)
        (comm if stream != 7 else compute).append((k_ts, k_ts + k_dur))
        b.stream = 7
        host += 3

    def gather(layer: int, phase: str, k_ts: float) -> None:
        nonlocal host
        hook = f"FSDP::{phase}_prefetch for layers.{layer}" if prefetch and layer_ahead(layer, phase) \
            else f"FSDP::pre_{phase} (layers.{layer})"
        b.annotation(hook, host, 10)
        b.annotation(f"FSDP::all_gather (layers.{layer})", host + 1, 8)
        host += 2
        kernel(AG_KERNEL, 8, k_ts, GATHER_US)
        host += 6

    def layer_ahead(layer: int, phase: str) -> bool:
        return layer > 0 if phase == "forward" else layer < LAYERS - 1

    t = device
    for i in range(LAYERS):  # forward
        if not prefetch or i == 0:
            gather(i, "forward", t)
            t += GATHER_US
        if prefetch and i + 1 < LAYERS:
            gather(i + 1, "forward", t + 50)
        kernel(GEMM_KERNEL, 7, t, GEMM_US)
        t += GEMM_US
    for i in reversed(range(LAYERS)):  # backward
        if not prefetch or i == LAYERS - 1:
            gather(i, "backward", t)
            t += GATHER_US
        if prefetch and i > 0:
            gather(i - 1, "backward", t + 50)
        kernel(GEMM_KERNEL, 7, t, 2 * GEMM_US)
        b.annotation(f"FSDP::post_backward_reduce (layers.{i})", host, 8)
        host += 1
        done = t + 2 * GEMM_US
        kernel(RS_KERNEL, 9, done if not prefetch or i == 0 else done + 50, REDUCE_US)
        t = done if prefetch and i > 0 else done + REDUCE_US
    # The step ends as a training step does, the host waiting for the device (the optimizer's
    # .item() or a synchronize): the step's length is the device's.
    b.event(b.spelling["runtime"], "cudaDeviceSynchronize", host + 20, t + 5 - host - 20)
    b.step(1, 0, t + 10)
    b.write(path)
    return compute, comm


@pytest.mark.parametrize("prefetch", [True, False])
def test_a_gpu_fsdp_job_with_its_collectives_hidden_gets_no_finding(tmp_path, prefetch):
    """The healthy control on a GPU (what a CPU job over gloo cannot show: there each
    collective waits 2-8 ms however small, docs/parallelism.md): prefetched all-gathers and
    reduce-scatters on their own streams beside the GEMMs leave only the first all-gather of
    each pass and the last reduce-scatter exposed, under the rule's share; the same step without prefetch
    gets fsdp_exposed_communication, its cause the missing forward prefetch. The exposed share
    is read from the construction's own spans."""
    compute, comm = gpu_fsdp_step(tmp_path / "rank0.json", prefetch)
    analysis = trainprof.analyze(tmp_path / "rank0.json")
    findings = diagnose(analysis)
    step_us = analysis.ranks[0].steps.median_ms * 1000.0
    exposed = sum(b - a for a, b in minus(union(comm), union(compute)))
    mine = [f for f in findings if f.id == "fsdp_exposed_communication"]
    assert analysis.ranks[0].sections.parallelism.kinds == ["fsdp"]
    if prefetch:
        # exposed: the first all-gather of each pass and the last reduce-scatter
        assert exposed == pytest.approx(2 * GATHER_US + REDUCE_US)
        assert exposed / step_us * 100 < rules.FSDP_EXPOSED_PCT
        assert not PARALLEL_IDS & {f.id for f in findings}, [(f.id, f.title) for f in findings]
    else:
        assert exposed == pytest.approx(2 * LAYERS * GATHER_US + LAYERS * REDUCE_US)
        (f,) = mine
        assert f.extra["cause"] == "no_forward_prefetch"
        assert f.saving_pct == pytest.approx(exposed / step_us * 100, rel=0.05)
