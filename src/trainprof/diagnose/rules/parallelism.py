"""Rules about how the job is parallelised: pipeline stages out of balance, a pipeline with too
few micro-batches, FSDP collectives the step waits for (analysis/parallelism/, see
docs/parallelism.md); and the communication fix that fits the parallelism the job uses."""

from __future__ import annotations

from trainprof.analysis.parallelism.result import LayerComm, Parallelism
from trainprof.analysis.parallelism.signals import P2P_TYPES
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import less_straggler_waits, pct_of, rank_finding, where
from trainprof.diagnose.rules.model_parallel import TENSOR_PARALLEL_FIX

# pipeline_imbalance: balancing the stages would save at least this share of the step (stages
# of equal work came out more than 10% apart on a loaded host: docs/rules.md).
PIPELINE_IMBALANCE_PCT = 15.0
# pipeline_bubble: the schedule's ideal bubble, (S - 1) / (M + S - 1), above this share of the
# step (2 stages need 6 micro-batches or more, 4 stages 18 or more).
PIPELINE_BUBBLE_PCT = 15.0
# fsdp_exposed_communication: the FSDP layers' exposed communication above this share.
FSDP_EXPOSED_PCT = 10.0
#: Layers named in a finding's evidence.
_LAYERS_SHOWN = 3

_SPLIT_SNIPPET = (
    "# torch.distributed.pipelining: move the split point so each stage computes the same\n"
    "from torch.distributed.pipelining import SplitPoint, pipeline\n"
    "pipe = pipeline(model, mb_args=(x_mb,),\n"
    "                split_spec={'layers.K': SplitPoint.BEGINNING})   # K: balanced\n"
    "# or, building each stage by hand: give stage {heavy} fewer layers\n"
    "stage_layers = layers[start[rank]:start[rank + 1]]   # balanced boundaries"
)
_SCHEDULE_SNIPPET = (
    "from torch.distributed.pipelining import Schedule1F1B, ScheduleInterleaved1F1B\n"
    "schedule = Schedule1F1B(stage, n_microbatches=4 * num_stages, loss_fn=loss_fn)\n"
    "# or several stages per rank with an interleaved (or zero-bubble) schedule:\n"
    "schedule = ScheduleInterleaved1F1B(stages, n_microbatches=4 * num_stages, loss_fn=loss_fn)"
)
MORE_MICRO_BATCHES = Fix(
    summary="Feed the pipeline more micro-batches (at least 4 per stage), or use an interleaved "
            "or zero-bubble schedule (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble), "
            "so the stages spend less of the step filling and draining the pipeline.",
    pytorch=_SCHEDULE_SNIPPET,
)
_FORWARD_PREFETCH = (
    "for i, layer in enumerate(model.layers[:-1]):\n"
    "    layer.set_modules_to_forward_prefetch([model.layers[i + 1]])"
)
_BACKWARD_PREFETCH = (
    "for i, layer in enumerate(model.layers[1:], start=1):\n"
    "    layer.set_modules_to_backward_prefetch([model.layers[i - 1]])"
)
_KEEP_GATHERED = (
    "fully_shard(model.layers[-1], reshard_after_forward=False)   # no all-gather again in backward\n"
    "# or for every layer when memory allows (ZeRO-2 style):\n"
    "model.set_reshard_after_forward(False)"
)
_COARSER = (
    "for block in model.blocks:          # fewer, larger units: one per block, not per Linear\n"
    "    fully_shard(block)\n"
    "fully_shard(model)"
)
_REDUCE = (
    "mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)\n"
    "for block in model.blocks:          # fewer, larger units: one per block, not per Linear\n"
    "    fully_shard(block, mp_policy=mp)"
)
#: fsdp_exposed_communication's fixes, by what was seen (docs/rules.md).
FSDP_FIXES = {
    "no_forward_prefetch": Fix(
        summary="No layer's all-gather is issued ahead in forward: prefetch each layer's "
                "all-gather during the layer before it (set_modules_to_forward_prefetch), so it "
                "runs beside that layer's compute.",
        pytorch=_FORWARD_PREFETCH),
    "no_backward_prefetch": Fix(
        summary="No layer's all-gather is issued ahead in backward: prefetch them "
                "(set_modules_to_backward_prefetch), so each runs beside the backward of the "
                "layer after it.",
        pytorch=_BACKWARD_PREFETCH),
    "gathered_again": Fix(
        summary="The all-gathers are prefetched but still exposed, most of it the first "
                "backward layer's (nothing runs before it to hide it): keep the last layers' "
                "parameters gathered after forward (reshard_after_forward=False), for every "
                "layer when memory allows.",
        pytorch=_KEEP_GATHERED),
    "slow_gathers": Fix(
        summary="The forward all-gathers are prefetched but take longer than the layer they "
                "run beside: gather fewer bytes (MixedPrecisionPolicy(param_dtype=bfloat16)), "
                "prefetch two layers ahead, or give each rank more rows so each layer "
                "computes longer.",
        pytorch="mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16)\n"
                "for i, layer in enumerate(model.layers[:-2]):\n"
                "    layer.set_modules_to_forward_prefetch(list(model.layers[i + 1:i + 3]))"),
    "small_units": Fix(
        summary="Each all-gather is tiny and costs about its fixed latency: shard whole blocks "
                "rather than single layers, so the all-gathers are fewer and larger.",
        pytorch=_COARSER),
    "serialised": Fix(
        summary="The reduce-scatters queue behind the all-gathers on one communicator: give "
                "them their own process group (set_separate_reduce_scatter_group) so both run "
                "at once, and reduce in bf16 (MixedPrecisionPolicy(reduce_dtype=bfloat16)).",
        pytorch="model.set_separate_reduce_scatter_group(True)   # torch 2.11 and later\n"
                + _REDUCE),
    "reduce_scatter": Fix(
        summary="Make the reduce-scatters cheaper and fewer: larger FSDP units (wrap blocks, "
                "not single layers) and gradients reduced in bf16 (MixedPrecisionPolicy"
                "(reduce_dtype=torch.bfloat16)).",
        pytorch=_REDUCE),
}
# fsdp_exposed_communication: a pass whose all-gathers are never issued ahead is the cause when
# it exposes at least this share of the all-gathers' time (FSDP2 prefetches in backward by
# itself, not in forward: in the recorded job without prefetch, forward held 27% to 66% of the
# all-gather waits; under a tenth, prefetching that pass is not where the time is).
FSDP_UNPREFETCHED_SHARE = 0.10
# fsdp_exposed_communication: an all-gather shorter than this (mean over the rank's) costs
# about its fixed latency (NCCL's within a node is 10-30 µs): fewer, larger units help more
# than prefetching.
FSDP_SMALL_GATHER_MS = 0.1
_FIGURE_NAMES = {"forward_gather_ms": "all-gather in forward",
                 "backward_gather_ms": "all-gather in backward",
                 "reduce_scatter_ms": "reduce-scatter in backward"}
#: communication_exposed's fix for jobs that are not DDP (docs/parallelism.md).
TENSOR_PARALLEL_COMM = TENSOR_PARALLEL_FIX
EXPERT_PARALLEL_COMM = Fix(
    summary="Overlap the experts' all-to-all with compute (dispatch/combine of one micro-batch "
            "beside another's compute, as DualPipe does; DeepEP's kernels, its low-latency "
            "ones for decoding, with a hook that receives in the background), and balance the "
            "tokens per expert (see expert_imbalance).",
    pytorch=(
        "# dispatch micro-batch i+1's tokens while micro-batch i's experts compute\n"
        "work = dist.all_to_all_single(recv_next, send_next, out_splits, in_splits,\n"
        "                              group=ep_group, async_op=True)\n"
        "out = experts(recv_this)\n"
        "work.wait()"
    ),
)
PIPELINE_COMM = Fix(
    summary="The stages' sends and receives wait on each other: balance the stages and feed "
            "more micro-batches (see pipeline_imbalance and pipeline_bubble).",
    pytorch=_SCHEDULE_SNIPPET,
)
GENERIC_COMM = Fix(
    summary="Overlap the collectives with compute (issue them asynchronously and wait as late "
            "as possible), send fewer and larger messages, and fewer bytes (bf16).",
    pytorch="work = dist.all_reduce(t, async_op=True)\n...   # independent compute\nwork.wait()",
)


def parallelism_of(r: RankAnalysis) -> Parallelism | None:
    return r.sections.parallelism


def comm_fix(r: RankAnalysis) -> Fix | None:
    """communication_exposed's fix for the parallelism the rank shows; None for DDP (and for a
    job whose collectives are all-reduces with nothing else shown): the DDP advice fits."""
    p = parallelism_of(r)
    if p is None:
        return None
    kinds = set(p.kinds)
    if "ddp" in kinds or (not kinds and p.calls.get("all_reduce")):
        return None
    if "fsdp" in kinds:
        return FSDP_FIXES[fsdp_cause(p)[0]]
    for kind, fix in (("tensor", TENSOR_PARALLEL_COMM), ("expert", EXPERT_PARALLEL_COMM),
                      ("pipeline", PIPELINE_COMM)):
        if kind in kinds:
            return fix
    return GENERIC_COMM


def counted_elsewhere_ms(r: RankAnalysis) -> tuple[float, str]:
    """ms per step of the rank's exposed communication that a parallelism finding counts, and
    which: a pipeline stage's sends and receives (their exposed time as the communication
    section measures it), or the FSDP layers' collectives."""
    p, comm = parallelism_of(r), r.sections.communication
    if p is None:
        return 0.0, ""
    if p.pipeline is not None and comm is not None and comm.steps:
        p2p = sum(t.exposed_us for t in comm.types if t.type in P2P_TYPES)
        return p2p / comm.steps / 1000.0, "pipeline send/recv waits"
    if p.layers:
        return p.fsdp_exposed_ms_per_step(), "FSDP layers' collectives"
    return 0.0, ""


def pipeline_imbalance(analysis: Analysis, found: list[Finding]) -> list[Finding]:
    pipe = analysis.job.pipeline
    heavy = pipe.heaviest if pipe is not None else None
    if pipe is None or heavy is None or pipe.step_ms <= 0:
        return []
    saving = pipe.imbalance_saving_ms / pipe.step_ms * 100.0
    if saving < PIPELINE_IMBALANCE_PCT:
        return []
    r = _rank(analysis, heavy.rank)
    light = min(pipe.stages, key=lambda s: s.compute_ms)
    move = (heavy.compute_ms - pipe.mean_compute_ms) / heavy.compute_ms * 100.0
    evidence = [Evidence(f"stage {s.stage} computes", s.compute_ms, "ms/step",
                         f"rank {s.rank}, waits {s.waiting_ms:.1f} ms in send/recv")
                for s in pipe.stages]
    evidence += [Evidence("heaviest stage over the mean stage", pipe.imbalance_pct, "%",
                          f"stage {heavy.stage}"),
                 Evidence("micro-batches", pipe.micro_batches or "unknown", "",
                          pipe.schedule or "schedule unknown")]
    fix = Fix(summary=f"Move about {move:.0f}% of stage {heavy.stage}'s work (its last layers) "
                      f"to stage {light.stage} (or spread it over the lighter stages), so every "
                      f"stage computes about {pipe.mean_compute_ms:.1f} ms per step.",
              pytorch=_SPLIT_SNIPPET.replace("{heavy}", str(heavy.stage)))
    finding = rank_finding(
        r, "pipeline_imbalance", saving_severity(saving),
        f"Pipeline stage {heavy.stage} (rank {heavy.rank}) computes {pipe.imbalance_pct:.0f}% "
        "more than the mean stage: the other stages wait for it",
        "A pipeline runs at the pace of its slowest stage; the lighter stages spend the "
        "difference waiting in recv/send for it, every micro-batch.",
        evidence, saving, "the stages balanced: the step follows the mean stage's compute, "
        "(M + S - 1) / M x (heaviest - mean)", fix, stage=heavy.stage)
    finding.saving_ms = pipe.imbalance_saving_ms
    return [finding]


def pipeline_bubble(analysis: Analysis, found: list[Finding]) -> list[Finding]:
    pipe = analysis.job.pipeline
    ideal = pipe.ideal_bubble_pct if pipe is not None else None
    heavy = pipe.heaviest if pipe is not None else None
    if pipe is None or ideal is None or heavy is None or ideal <= PIPELINE_BUBBLE_PCT:
        return []
    n, m = len(pipe.stages), pipe.micro_batches or 1
    # Filling and draining: S - 1 micro-batch times of the slowest stage.
    saving_ms = (n - 1) / m * heavy.compute_ms
    saving = saving_ms / pipe.step_ms * 100.0 if pipe.step_ms > 0 else 0.0
    evidence = [Evidence("stages", n, "", "ranks " + ", ".join(str(s.rank) for s in pipe.stages)),
                Evidence("micro-batches per step", m, "", pipe.schedule or "schedule unknown"),
                Evidence("ideal bubble, (S - 1) / (M + S - 1)", ideal, "%", "of the step"),
                Evidence("the stages' idle share", max(s.idle_pct for s in pipe.stages), "%",
                         "the most idle stage, waiting included")]
    finding = rank_finding(
        _rank(analysis, heavy.rank), "pipeline_bubble",
        saving_severity(saving),
        f"The pipeline's bubble takes {ideal:.0f}% of each step: {m} micro-batches for {n} "
        "stages",
        "Every stage idles while the pipeline fills and drains; with few micro-batches that "
        "bubble is a large part of the step.",
        evidence, saving, "no bubble: (S - 1) micro-batch times of the slowest stage saved",
        MORE_MICRO_BATCHES)
    finding.saving_ms = saving_ms
    return [finding]


def fsdp_exposed_communication(analysis: Analysis, found: list[Finding]) -> list[Finding]:
    return less_straggler_waits(analysis, _fsdp_exposed)


def _fsdp_exposed(r: RankAnalysis, waited_ms: float) -> Finding | None:
    """The rank's FSDP communication with no compute running, less the time it waited in
    collectives for a straggler (the straggler finding's)."""
    p = parallelism_of(r)
    if p is None or not p.layers or not p.steps:
        return None
    total_ms = p.fsdp_exposed_ms_per_step()
    exposed_ms = max(total_ms - waited_ms, 0.0)
    share = pct_of(r, exposed_ms)
    if share <= FSDP_EXPOSED_PCT:
        return None
    cause, figures = fsdp_cause(p)
    named = sorted((x for x in p.layers if sum(getattr(x, f) for f in figures) > 0),
                   key=lambda x: -sum(getattr(x, f) for f in figures))[:_LAYERS_SHOWN]
    top = named[0] if named else max(p.layers, key=lambda x: x.exposed_ms)
    evidence = [Evidence("FSDP communication with no compute running", exposed_ms, "ms/step",
                         where(r))]
    for name, label in _FIGURE_NAMES.items():
        total = sum(getattr(x, name) for x in p.layers)
        evidence.append(Evidence(label, total, "ms/step", where(r, "every layer")))
    evidence += [Evidence(f"layer {x.layer or '(root)'}", x.exposed_ms, "ms/step",
                          where(r, _split(x))) for x in named]
    if p.fsdp_queues is not None and p.fsdp_queues.serialised is not None:
        q = p.fsdp_queues
        evidence.append(Evidence("all-gathers and reduce-scatters serialised",
                                 "yes" if q.serialised else "no", "",
                                 where(r, f"{q.queues} queue(s), "
                                          f"{q.process_groups} process group(s)")))
    if waited_ms:
        evidence.append(Evidence("left out: waiting for the straggler",
                                 min(waited_ms, total_ms), "ms/step", where(r)))
    names = ", ".join(x.label for x in named)
    return rank_finding(
        r, "fsdp_exposed_communication", saving_severity(share),
        f"FSDP's collectives are not hidden: {share:.0f}% of each step waits for them, "
        f"{_CAUSES[cause]} (layers {names})",
        "FSDP gathers each layer's parameters before it runs and reduce-scatters its gradients "
        "after; unless they run during another layer's compute, the step waits for them.",
        evidence, share, "upper bound: every FSDP collective hidden under compute",
        FSDP_FIXES[cause], layer=top.layer, layers=[x.layer for x in named], cause=cause)


#: What each cause says in the finding's title.
_CAUSES = {"no_forward_prefetch": "most in all-gathers issued only when each layer needs them "
                                  "in forward (no prefetch)",
           "no_backward_prefetch": "most in all-gathers issued only when each layer needs them "
                                   "in backward (no prefetch)",
           "gathered_again": "most in backward all-gathers, prefetched but still exposed",
           "slow_gathers": "most in forward all-gathers, prefetched but still exposed",
           "small_units": "most in many tiny all-gathers",
           "serialised": "most in reduce-scatters queued behind the all-gathers",
           "reduce_scatter": "most in the reduce-scatters"}


def fsdp_cause(p: Parallelism) -> tuple[str, tuple[str, ...]]:
    """What the rank's FSDP communication shows (a key of FSDP_FIXES), and the figures the
    cause is about (docs/rules.md): reduce-scatters exposing more than the all-gathers
    (serialised with them or not); else a pass (forward, backward) whose all-gathers all have
    prefetch distance 0 and expose at least FSDP_UNPREFETCHED_SHARE of the all-gathers' time;
    else tiny all-gathers; else all-gathers prefetched but still exposed, in backward (gathered
    again) or in forward (slower than the layer they hide under)."""
    if not p.layers:  # FSDP ranges but no collective seen: the first thing to try
        return "no_forward_prefetch", ("forward_gather_ms",)
    total = {name: sum(getattr(x, name) for x in p.layers) for name in _FIGURE_NAMES}
    gathers_ms = total["forward_gather_ms"] + total["backward_gather_ms"]
    queues = p.fsdp_queues
    if total["reduce_scatter_ms"] > gathers_ms:
        serial = queues is not None and queues.serialised
        return ("serialised" if serial else "reduce_scatter"), ("reduce_scatter_ms",)
    unprefetched = []
    for figure, distances in (("forward_gather_ms", [d for x in p.layers
                                                      for d in x.forward_distances]),
                              ("backward_gather_ms", [d for x in p.layers
                                                       for d in x.backward_distances])):
        if distances and max(distances) == 0 and \
                total[figure] >= FSDP_UNPREFETCHED_SHARE * gathers_ms:
            unprefetched.append(figure)
    if unprefetched:
        figure = max(unprefetched, key=total.__getitem__)
        return ("no_forward_prefetch" if figure == "forward_gather_ms"
                else "no_backward_prefetch"), (figure,)
    count = sum(x.gathers_per_step for x in p.layers)
    if queues is not None and count and queues.gather_ms / count < FSDP_SMALL_GATHER_MS:
        return "small_units", ("forward_gather_ms", "backward_gather_ms")
    if total["backward_gather_ms"] > total["forward_gather_ms"]:
        return "gathered_again", ("backward_gather_ms",)
    return "slow_gathers", ("forward_gather_ms",)


def _split(x: LayerComm) -> str:
    ahead = "/".join("-" if d is None else f"{d:g}" for d in
                     (x.forward_prefetch_distance, x.backward_prefetch_distance))
    return (f"forward all-gather {x.forward_gather_ms:.1f}, backward all-gather "
            f"{x.backward_gather_ms:.1f}, reduce-scatter {x.reduce_scatter_ms:.1f} ms; "
            f"prefetch distance forward/backward {ahead}")


def _rank(analysis: Analysis, rank: int) -> RankAnalysis:
    return next(r for r in analysis.ranks if r.rank == rank)


