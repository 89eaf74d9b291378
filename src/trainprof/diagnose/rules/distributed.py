"""Job rules about several ranks: communication the compute does not hide, and stragglers.

Both are job rules (they take the whole ``Analysis``) because the time a rank waits for a
straggler inside a collective looks like exposed communication on that rank: it is charged to
the straggler and taken out of the waiting rank's communication.
"""

from __future__ import annotations

import numpy as np

from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import less_straggler_waits, pct_of, rank_finding, where
from trainprof.diagnose.rules.parallelism import GENERIC_COMM, comm_fix, counted_elsewhere_ms

# communication_exposed: communication with no compute running, per step, as a share of the
# step; or, on a GPU, as a share of the GPU's busy time (a host-bound GPU idles most of the
# step, which hides how much of its own work is waiting on the network).
EXPOSED_COMM_PCT = 15.0
EXPOSED_COMM_BUSY_PCT = 20.0
EXPOSED_COMM_MIN_PCT = 2.0
# straggler: analysis/job/stragglers.py names the rank. Every severity here is the saving's
# (findings.SAVING_SEVERITY).

#: The overlap advice every backend shares; the backend's own advice is added to it.
_OVERLAP = (
    "Overlap gradient communication with backward and send less often: DDP bucket sizes, "
    "no all-reduce on gradient-accumulation micro-steps, a larger batch per rank"
)
_OVERLAP_PYTORCH = (
    "model = DDP(model, bucket_cap_mb=50, gradient_as_bucket_view=True)\n"
    "with model.no_sync():   # on gradient-accumulation micro-steps\n"
    "    loss.backward()"
)
_OVERLAP_ACCELERATE = (
    "from accelerate.utils import DistributedDataParallelKwargs\n"
    "accelerator = Accelerator(gradient_accumulation_steps=4, kwargs_handlers=[\n"
    "    DistributedDataParallelKwargs(bucket_cap_mb=50, gradient_as_bucket_view=True)])\n"
    "with accelerator.accumulate(model):\n"
    "    ..."
)
#: On GPUs over NCCL: the overlap advice alone.
OVERLAP_COMM = Fix(summary=_OVERLAP + ".", pytorch=_OVERLAP_PYTORCH,
                   accelerate=_OVERLAP_ACCELERATE)
#: GPUs talking over gloo: NCCL is the backend for GPU tensors.
OVERLAP_COMM_GLOO_GPU = Fix(
    summary=_OVERLAP + ", and NCCL instead of gloo for GPU tensors.",
    pytorch="dist.init_process_group('nccl')\n" + _OVERLAP_PYTORCH,
    accelerate=_OVERLAP_ACCELERATE,
)
#: A CPU-only job (gloo): no GPU advice; halve the bytes instead.
OVERLAP_COMM_CPU = Fix(
    summary=_OVERLAP + ", and fewer bytes: compress gradients to bf16/fp16 with a DDP "
    "communication hook.",
    pytorch=("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
             "model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n"
             + _OVERLAP_PYTORCH),
    accelerate=_OVERLAP_ACCELERATE,
)


def uses_ddp(r: RankAnalysis) -> bool:
    """Whether the rank's parallelism section says DDP: the only jobs given DDP's fixes
    (bucket_cap_mb, no_sync, communication hooks)."""
    p = r.sections.parallelism
    return p is not None and "ddp" in p.kinds


def overlap_fix(r: RankAnalysis, backend: str | None) -> Fix:
    """The fix that fits the rank's parallelism (rules/parallelism.py; DDP advice only where
    the parallelism section says DDP), device and backend (no NCCL advice on a CPU-only job)."""
    fitting = comm_fix(r)
    if fitting is not None:
        return fitting
    if not uses_ddp(r):
        return GENERIC_COMM
    if not r.gpus:
        return OVERLAP_COMM_CPU
    if (backend or "").lower() == "gloo":
        return OVERLAP_COMM_GLOO_GPU
    return OVERLAP_COMM


BALANCE_RANKS = Fix(
    summary=(
        "Make the slow rank keep pace: fix its own bottleneck (often its data loading), give "
        "every rank the same amount of work (balanced shards, equal sequence lengths), and "
        "check its machine (thermal throttling, a noisy neighbour)."
    ),
    pytorch=(
        "sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)\n"
        "loader = DataLoader(dataset, batch_size=bs, sampler=sampler, num_workers=4)"
    ),
    accelerate=(
        "loader = DataLoader(dataset, batch_size=bs, num_workers=4)\n"
        "loader = accelerator.prepare(loader)   # shards evenly across ranks"
    ),
)


#: A straggler held back by its compute: the others wait for its compute, not for the network,
#: so DDP's bucket or compression advice would not help.
BALANCE_COMPUTE = Fix(
    summary=(
        "Give the slow rank no more compute than the others: the same shapes and tokens per "
        "rank (sequences bucketed or packed by length, balanced shards or experts), no extra "
        "work on it (logging, evaluation, checkpointing on one rank: move it off the step or "
        "spread it), and check its device (clocks, thermal throttling, another process on it). "
        "Communication settings do not help: the others wait for its compute, not the network."
    ),
    pytorch=(
        "# the same work per rank: even shards, batches of similar lengths on every rank\n"
        "sampler = DistributedSampler(dataset, drop_last=True)\n"
        "# e.g. transformers' LengthGroupedSampler, or sequences packed to one length\n"
        "if rank == 0 and step % log_every == 0: ...   # keep one-rank extras off the step"
    ),
)


def straggler_fix(reason: str | None) -> Fix:
    """The fix for what holds the straggler back (analysis/job/straggler_cause.py)."""
    return BALANCE_COMPUTE if reason == "compute" else BALANCE_RANKS


def communication_exposed(analysis: Analysis, found: list[Finding]) -> list[Finding]:
    return less_straggler_waits(analysis, _exposed)


def _exposed(r: RankAnalysis, waited_ms: float) -> Finding | None:
    comm = r.sections.communication
    if comm is None or comm.source == "none" or not comm.steps:
        return None
    exposed_ms = comm.exposed_us / comm.steps / 1000.0
    # A pipeline's send/recv waits and FSDP layers' collectives have findings of their own.
    elsewhere_ms, elsewhere = counted_elsewhere_ms(r)
    elsewhere_ms = min(elsewhere_ms, max(exposed_ms - waited_ms, 0.0))
    own_ms = max(exposed_ms - waited_ms - elsewhere_ms, 0.0)
    share = pct_of(r, own_ms)
    busy = r.timeline.busy_pct if r.timeline is not None else None
    # Both are shares of a step, but of the mean step and of the device's step window: capped,
    # as exposed communication is device time and cannot pass the device's busy time.
    of_busy = min(share / busy * 100.0, 100.0) if busy else None
    if share <= EXPOSED_COMM_PCT and not (
            of_busy is not None and of_busy >= EXPOSED_COMM_BUSY_PCT
            and share >= EXPOSED_COMM_MIN_PCT):
        return None
    evidence = [
        Evidence("communication with no compute running", own_ms, "ms/step", where(r)),
        Evidence("of the step", share, "%", where(r)),
        Evidence("all communication", comm.busy_us / comm.steps / 1000.0, "ms/step",
                 where(r, f"{comm.source}, {comm.overlap_pct or 0:.0f}% hidden by compute")),
    ]
    if of_busy is not None:
        evidence.append(Evidence("of the GPU's busy time", of_busy, "%", where(r)))
    for t in comm.types[:2]:
        size = f", {t.bytes / comm.steps / 1e6:.1f} MB/step" if t.bytes is not None else ""
        evidence.append(Evidence(f"{t.type}", t.count / comm.steps, "per step",
                                 where(r, f"{t.busy_us / comm.steps / 1000:.1f} ms/step{size}")))
    if waited_ms:
        evidence.append(Evidence("left out: waiting for the straggler", waited_ms, "ms/step",
                                 where(r)))
    if elsewhere_ms:
        evidence.append(Evidence(f"left out: {elsewhere}", elsewhere_ms, "ms/step", where(r)))
    return rank_finding(
        r, "communication_exposed",
        saving_severity(share),
        f"Communication not hidden under compute takes {share:.0f}% of each step",
        "Collectives (gradient all-reduce and others) run while no compute does, so the step "
        "pays for them in full instead of overlapping them with the backward pass.",
        evidence, share, "upper bound: all communication overlapped with compute",
        overlap_fix(r, comm.backend),
    )


def straggler(analysis: Analysis, found: list[Finding]) -> list[Finding]:
    s = analysis.job.stragglers
    if s is None or s.straggler is None:
        return []
    slow = next(w for w in s.ranks if w.rank == s.straggler)
    others = [w for w in s.ranks if w.rank != s.straggler]
    exposed = [w.exposed_comm_ms_per_step for w in others if w.exposed_comm_ms_per_step]
    # The arrival skew it caused (the others waiting for it to start, on the trace clocks;
    # analysis/job/arrival.py), no more than the clock-free wait (the two agree on one machine;
    # clocks offset between machines move the first only); bounded by the others' exposed
    # communication (a union of intervals) less the straggler's own (the transfer itself: it
    # arrives last and does not wait).
    saving_ms = min(slow.caused_skew_ms_per_step or np.inf, slow.caused_wait_ms_per_step)
    if exposed:
        bound = float(np.mean(exposed)) - (slow.exposed_comm_ms_per_step or 0.0)
        saving_ms = min(saving_ms, max(bound, 0.0))
    r = next(x for x in analysis.ranks if x.rank == s.straggler)
    step = float(np.median([w.step_median_ms for w in s.ranks]))
    saving = saving_ms / step * 100.0 if step > 0 else 0.0
    evidence = [
        Evidence("arrived last at collectives", f"{slow.last_arrivals} of {s.matched}", "",
                 f"rank {slow.rank}"),
        Evidence("the other ranks waited for it", slow.caused_wait_ms_per_step, "ms/step",
                 "sum over its collectives"),
        Evidence("arrival skew it caused", slow.caused_skew_ms_per_step, "ms/step",
                 f"the others' wait for it to start, trace clocks; it started last at "
                 f"{slow.started_last} of {s.matched}"),
        Evidence("their communication not hidden by compute",
                 float(np.mean(exposed)) if exposed else "unknown",
                 "ms/step" if exposed else "", "the other ranks"),
        Evidence("median step", step, "ms", "all ranks"),
    ]
    if s.cause is not None:
        evidence.append(Evidence(f"the cause: {s.cause.label} ({' + '.join(s.cause.categories)})",
                                 s.cause.rank_ms, "ms/step",
                                 f"rank {s.straggler}; the other ranks' median "
                                 f"{s.cause.others_ms:.1f} ms"))
    own = [f for f in found if f.rank == s.straggler and f.id != "straggler"]
    if own:
        top = max(own, key=lambda f: f.saving_pct)
        evidence.append(Evidence(f"its own largest finding: {top.id}", top.saving_pct,
                                 "% of its step", f"rank {s.straggler}"))
    because = "" if s.cause is None else f", held back by {s.cause.label}"
    finding = rank_finding(
        r, "straggler", saving_severity(saving),
        f"Rank {s.straggler} is a straggler{because}: the other ranks wait {saving_ms:.1f} ms "
        "per step for it",
        "Every collective waits for the last rank to arrive; this rank arrives last nearly "
        "every time, so the whole job runs at its pace.",
        evidence, saving, "the straggler keeps pace: the others stop waiting for it to arrive "
        "at the collectives (the arrival skew it causes)",
        straggler_fix(None if s.cause is None else s.cause.reason),
    )
    finding.saving_ms = min(saving_ms, step)  # of the job's median step, not the rank's
    return [finding]
