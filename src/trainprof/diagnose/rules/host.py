"""Rules about the host holding the step back: launching, syncing, Python between steps, noise."""

from __future__ import annotations

from trainprof.analysis.overview.step_spread import StepSpread
from trainprof.analysis.overview.steps import TIME_WINDOWS
from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.syncs import SyncSite
from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import (
    duration,
    ms_of,
    rank_finding,
    readable_us,
    where,
)
from trainprof.diagnose.rules.compilation import untraced_left_pct
from trainprof.diagnose.rules.input import loader_fix
from trainprof.diagnose.verdicts import (  # noqa: F401 (the rule's thresholds, by its module)
    STEP_CV,
    STEP_VARIANCE_MIN_PCT,
    STEP_VARIANCE_MIN_SLOW,
)

# host_bound: GPU idle in the step that no data wait, collective, inline preprocessing or
# after-optimizer Python explains (analysis/sections/host.py), as a share of the step.
HOST_BOUND_PCT = 20.0
# small_kernels: most kernels shorter than 10 µs or than their own launch, and the GPU idle
# while the host launches back to back for at least this share of the step.
SMALL_KERNELS_SHARE_PCT = 50.0
SMALL_KERNELS_STARVED_PCT = 10.0
# sync_points: the loop's syncs per step, or the time they cost the GPU (% of the step).
SYNCS_PER_STEP = 1.0
SYNC_COST_PCT = 1.0
# logging_overhead: host time outside any op after the optimizer step, % of the step.
LOGGING_PCT = 10.0
# step_variance: its thresholds and verdict are in diagnose/verdicts.py (shared with the live
# view); the slow steps are found in analysis/overview/step_spread.py. The finding then says
# what the slow steps did: extra work when they ran more than SAME_WORK_OPS_PCT % more ops
# than the median step, the same work slower (contention, throttling, a pause) within it.
SAME_WORK_OPS_PCT = 5.0
#: Sync sites named in the evidence.
SYNC_SITES = 3

COMPILE = Fix(
    summary=(
        "Give the GPU more work per launch: a larger batch, torch.compile (fewer, fused "
        "kernels), CUDA graphs (mode='reduce-overhead'), and no host work inside the step."
    ),
    pytorch="model = torch.compile(model, mode='reduce-overhead')",
    accelerate=(
        "from accelerate.utils import TorchDynamoPlugin\n"
        "accelerator = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend='inductor',\n"
        "                                                          mode='reduce-overhead'))"
    ),
)
#: The same advice for a job that already replays CUDA graphs: no "use CUDA graphs".
COMPILE_WITH_GRAPHS = Fix(
    summary=(
        "Give the GPU more work per launch: a larger batch, fewer and fused kernels "
        "(torch.compile), and no host work inside the step; the job already replays CUDA "
        "graphs, so capture more of the step in them."
    ),
    pytorch="model = torch.compile(model)   # fuse the kernels left outside the graphs",
)


def _launch_fix(r: RankAnalysis) -> Fix:
    """COMPILE, or COMPILE_WITH_GRAPHS when the rank already replays CUDA/HIP graphs."""
    launch = r.sections.launch
    return COMPILE_WITH_GRAPHS if launch is not None and launch.graph_launches else COMPILE


NO_SYNC = Fix(
    summary=(
        "Keep values on the device inside the step: accumulate metrics as tensors and read "
        "them (.item(), .cpu(), print) every N steps; avoid `if tensor:` and data-dependent "
        "shapes (boolean indexing, nonzero) in the hot loop."
    ),
    pytorch=(
        "running = torch.zeros((), device='cuda')\n"
        "running += loss.detach()              # no sync\n"
        "if step % 100 == 0:\n"
        "    print(running.item() / 100)       # one sync every 100 steps\n"
        "    running.zero_()"
    ),
    accelerate=(
        "running += loss.detach()\n"
        "if step % 100 == 0:\n"
        "    accelerator.print(accelerator.gather(running).mean().item() / 100)"
    ),
)
LOG_LESS = Fix(
    summary=(
        "Log, compute metrics and checkpoint every N steps, not every step; move slow work "
        "(serialising, writing files, plotting) to a background thread."
    ),
    pytorch=(
        "if step % log_every == 0:\n"
        "    logger.log({'loss': loss.item(), 'step': step})\n"
        "# or hand the values to a thread:\n"
        "executor.submit(write_metrics, step, loss.detach().cpu())"
    ),
    accelerate=(
        "if step % log_every == 0:\n"
        "    accelerator.log({'loss': loss.item()}, step=step)"
    ),
)
STEADY_STEPS = Fix(
    summary=(
        "Move periodic work (evaluation, checkpoints, logging) out of the hot loop or make it "
        "asynchronous; avoid shape changes that recompile; check for contention."
    ),
    pytorch=(
        "if step % 500 == 0:   # rarely, and after the optimizer step\n"
        "    torch.save(model.state_dict(), path)"
    ),
    accelerate=(
        "if step % 500 == 0:\n"
        "    accelerator.save_state(output_dir)"
    ),
)
#: Slow steps that ran the same ops as the others: the time went outside the loop's work.
FIND_CONTENTION = Fix(
    summary=(
        "The slow steps ran the same ops as the others, only slower: find what else had the "
        "machine while they ran. Other processes on the host or the GPU (top, nvidia-smi), "
        "more threads than cores (size torch.set_num_threads / OMP_NUM_THREADS to the cores "
        "this process owns, DataLoader workers included), clock or power throttling; when the "
        "extra time is host time between ops, Python's garbage collector (gc.freeze() once "
        "the model and data are built)."
    ),
    pytorch=(
        "import gc, os\n"
        "torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) - num_workers))\n"
        "gc.freeze()   # after building the model and the data: the collector skips them"
    ),
)


def host_bound(r: RankAnalysis) -> Finding | None:
    host = r.sections.host
    share = host.pct.get("host_bound") if host is not None else None
    if share is None or share <= HOST_BOUND_PCT or _compiling_or_untraced(r, share):
        return None
    launch = r.sections.launch
    evidence = [
        Evidence("GPU idle while the host issues work (no data wait, collective or "
                 "preprocessing)", share, "%", where(r)),
    ]
    if r.timeline is not None:
        evidence.append(Evidence("GPU idle over the step window", r.timeline.idle_pct, "%",
                                 where(r)))
    if launch is not None and launch.cpu_bound_pct is not None:
        evidence.append(Evidence("of the step, GPU idle while launches run back to back",
                                 launch.cpu_bound_pct, "%", where(r)))
    if launch is not None and (median := launch.kernel_us.median) is not None:
        evidence.append(Evidence("median kernel", median, "µs",
                                 where(r, f"{launch.kernels} kernels")))
    gaps = r.sections.idle.longest if r.sections.idle is not None else []
    step = {"step": gaps[0].step} if gaps and gaps[0].step is not None else {}
    if gaps and gaps[0].host:
        g = gaps[0]
        busy = ", ".join(f"{h.name} {readable_us(h.overlap_us)}" for h in g.host)
        evidence.append(Evidence("longest GPU gap", g.duration_us / 1000, "ms",
                                 where(r, f"step {g.step}", f"host: {busy}")))
    return rank_finding(
        r, "host_bound", saving_severity(share),
        f"The GPU waits on the CPU for {share:.0f}% of each step",
        "For this share of the step no kernel runs while the host executes Python, operators "
        "or CUDA API calls: the GPU finishes work faster than the CPU can issue it.",
        evidence, share, "upper bound: the host work is overlapped with GPU work or removed",
        _launch_fix(r), **step,
    )


def _compiling_or_untraced(r: RankAnalysis, share: float) -> bool:
    """Whether compilation or untraced time (their own findings) explain the GPU's wait:
    then a larger batch or CUDA graphs are the wrong advice."""
    c = r.sections.compilation
    if c is None:
        return False
    explained = (c.compile_pct or 0.0) + untraced_left_pct(r)
    return share - explained <= HOST_BOUND_PCT


def small_kernels(r: RankAnalysis) -> Finding | None:
    launch = r.sections.launch
    if launch is None or not launch.kernels or launch.cpu_bound_pct is None:
        return None
    small = max(launch.small_kernel_pct or 0.0, launch.shorter_than_launch_pct or 0.0)
    starved = launch.cpu_bound_pct
    if small < SMALL_KERNELS_SHARE_PCT or starved < SMALL_KERNELS_STARVED_PCT:
        return None
    evidence = [
        Evidence("kernels shorter than 10 µs", launch.small_kernel_pct or 0.0, "%",
                 where(r, f"{launch.kernels} kernels")),
        Evidence("kernels shorter than their own launch call",
                 launch.shorter_than_launch_pct or 0.0, "%", where(r)),
        Evidence("median kernel / launch call", f"{launch.kernel_us.median:.1f} µs / "
                 f"{launch.launch_us.median:.1f} µs", "", where(r)),
        Evidence("GPU idle while launches run back to back", starved, "%", where(r)),
    ]
    return rank_finding(
        r, "small_kernels", saving_severity(starved),
        f"Tiny kernels: the GPU waits on kernel launches for {starved:.0f}% of each step",
        "Most kernels run for a few microseconds (under 10 µs, or less than their own launch "
        "call takes), so the GPU drains its queue and waits for the next launch: launch "
        "overhead, not compute, sets the pace.",
        evidence, starved, "fusion or CUDA graphs remove the launch gaps (upper bound)",
        _launch_fix(r),
    )


def sync_points(r: RankAnalysis) -> Finding | None:
    syncs = r.sections.syncs
    if syncs is None or not syncs.loop_count or not r.steps.count:
        return None
    per_step = syncs.loop_count / r.steps.count
    cost = syncs.loop_avoidable_pct or 0.0
    if per_step < SYNCS_PER_STEP and cost < SYNC_COST_PCT:
        return None
    n = r.steps.count
    evidence = [
        Evidence("host-device syncs per step", per_step, "", where(r)),
        duration("host blocked in them", syncs.loop_blocked_us / n, where(r), per_step=True),
        duration("GPU idle after them until the next GPU work",
                 syncs.loop_gpu_idle_after_us / n, where(r), per_step=True),
    ]
    for s in [s for s in syncs.sites if not _profilers(s)][:SYNC_SITES]:
        evidence.append(duration(f"{s.call} x{s.count}, blocked", s.total_us,
                                 ", ".join(x for x in (s.cause or s.caller or s.op,
                                                       s.source) if x)))
    if syncs.profiler_syncs:
        evidence.append(Evidence("not counted: the profiler's own synchronize when it stops",
                                 syncs.profiler_syncs, "", where(r)))
    return rank_finding(
        r, "sync_points", saving_severity(cost),
        f"{per_step:.1f} host-device syncs per step",
        "Each sync blocks the host until the GPU has finished everything queued; the GPU then "
        "idles until the host has launched the next work.",
        evidence, cost, "without the syncs the host runs ahead by the time it was blocked, "
        "and the GPU idle after each sync shrinks by as much", NO_SYNC,
    )


def _profilers(site: SyncSite) -> bool:
    return bool(site.cause and "profiler's own" in site.cause)


def logging_overhead(r: RankAnalysis) -> Finding | None:
    host = r.sections.host
    share = host.pct.get("after_optimizer") if host is not None else None
    if host is None or share is None or share <= LOGGING_PCT:
        return None
    worst = max(host.after_optimizer_per_step_ms, key=lambda p: p.ms)
    evidence = [
        Evidence("host time outside any op after the optimizer step", share, "%", where(r)),
        Evidence("per step", ms_of(r, share), "ms", where(r)),
        Evidence("longest", worst.ms, "ms", where(r, f"step {worst.step}")),
        *[Evidence("Python in that time", s.ms_per_step, "ms/step", s.name)
          for s in host.spots.get("after_optimizer", [])],
    ]
    return rank_finding(
        r, "logging_overhead", saving_severity(share),
        f"Work after the optimizer step (logging, metrics) takes {share:.0f}% of each step",
        "Between the optimizer step and the next batch the host runs Python that no PyTorch op "
        "records: logging, metric computation, checkpointing, progress bars.",
        evidence, share, "the work runs every N steps or in a background thread", LOG_LESS,
        step=worst.step,
    )


def step_variance(r: RankAnalysis) -> Finding | None:
    if r.step_source == TIME_WINDOWS:  # equal slices of a trace without steps: not steps
        return None
    s = r.steps
    verdict = verdicts.step_variance(StepSpread(
        count=s.count, cv=s.cv, median_ms=s.median_ms, mean_ms=s.mean_ms,
        slow_steps=tuple(s.slow_steps), slow_episodes=s.slow_episodes,
        slow_excess_ms=s.slow_excess_ms))
    if verdict is None:
        return None
    saving = verdict.saving_pct
    slow = {p["step"]: p["ms"] for p in s.per_step}
    names = ", ".join(f"#{n} ({slow[n]:.1f} ms)" for n in s.slow_steps[:6])
    evidence = [
        Evidence("coefficient of variation", s.cv * 100, "%", where(r)),
        Evidence("median step", s.median_ms, "ms", where(r)),
        Evidence("slow steps", names, "", where(r)),
    ]
    if s.slow_period:
        evidence.append(Evidence("slow every", s.slow_period, "steps", where(r)))
    title = f"Step times vary by {s.cv * 100:.0f}%: {len(s.slow_steps)} slow step(s)"
    why = ("Some steps take much longer than the median: periodic work (evaluation, "
           "checkpointing, logging, garbage collection, recompilation) or contention.")
    fix = STEADY_STEPS
    work = slow_step_work(s.ops_per_step, s.slow_step_ops)
    median_ops, slow_ops = s.ops_per_step or 0.0, s.slow_step_ops or 0.0  # counted when work
    if work is not None:
        evidence += [Evidence("ops per step (median)", round(median_ops), "", where(r)),
                     Evidence("ops per slow step", round(slow_ops), "", where(r))]
        grew = [f"{k} +{v:.1f} ms" for k, v in s.slow_excess_by_category_ms.items() if v >= 0.05]
        if grew:
            evidence.append(Evidence("extra time per slow step", ", ".join(grew[:3]), "",
                                     where(r)))
    if work == "extra":
        title += f", each running {slow_ops - median_ops:,.0f} more ops"
        why = ("The slow steps run more ops than the median step: periodic work inside the "
               "loop (evaluation, checkpointing, logging, recompilation).")
    elif work == "same" and _mostly(s.slow_excess_by_category_ms, "dataloader"):
        title += " that ran the same ops and waited for data"
        why = ("The slow steps ran the same ops as the median step and spent their extra time "
               "waiting for the next batch: the data loader falls behind now and then (slow "
               "items, too few workers, storage).")
        fix = loader_fix(r)
    elif work == "same":
        title += " that ran the same ops, slower"
        why = ("The slow steps ran the same ops as the median step, so the loop did no extra "
               "work in them: something outside it took the time (contention for the CPU or "
               "GPU, clock throttling, or a pause such as Python's garbage collector).")
        fix = FIND_CONTENTION
    return rank_finding(
        r, "step_variance", verdict.severity, title, why,
        evidence, saving, "the slow steps run as fast as the median step", fix,
        step=s.slow_steps[0],
    )


def _mostly(excess_ms: dict[str, float], category: str) -> bool:
    """Whether ``category`` holds at least half of the slow steps' extra time."""
    total = sum(excess_ms.values())
    return total > 0 and excess_ms.get(category, 0.0) >= total / 2


def slow_step_work(ops_per_step: float | None, slow_step_ops: float | None) -> str | None:
    """What the slow steps did: "extra" work (over SAME_WORK_OPS_PCT % more ops than the
    median step), the "same" work (within it), or None (ops not counted, or fewer ops)."""
    if ops_per_step is None or slow_step_ops is None or ops_per_step <= 0:
        return None
    change_pct = (slow_step_ops / ops_per_step - 1.0) * 100.0
    if change_pct > SAME_WORK_OPS_PCT:
        return "extra"
    return "same" if change_pct >= -SAME_WORK_OPS_PCT else None


# cuda_api_time: the step's time inside CUDA API calls with no device work recorded beside them
# (the breakdown's "runtime" category), as a share of the step, when host_bound cannot say it
# (a trace with API calls but no device events).
CUDA_API_PCT = 20.0
RECORD_GPU = Fix(
    summary=(
        "The step is spent inside CUDA API calls, and the trace holds no GPU activity to say "
        "what they wait for: record the GPU too (ProfilerActivity.CUDA), then look at the "
        "calls: allocation (cudaMalloc: let the caching allocator keep its blocks), blocking "
        "copies or syncs, or launch overhead (fewer, larger kernels; CUDA graphs)."
    ),
    pytorch=(
        "from torch.profiler import ProfilerActivity, profile\n"
        "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:\n"
        "    ..."
    ),
)


def cuda_api_time(r: RankAnalysis) -> Finding | None:
    share = r.breakdown_pct.get("runtime", 0.0)
    if share <= CUDA_API_PCT or r.gpus:
        return None  # with device events, host_bound and small_kernels measure this time
    evidence = [
        Evidence("step time inside CUDA API calls, nothing else running", share, "%",
                 where(r)),
        Evidence("per step", r.breakdown_ms.get("runtime", 0.0), "ms", where(r)),
        Evidence("device events in the trace", 0, "", where(r)),
    ]
    return rank_finding(
        r, "cuda_api_time", saving_severity(share),
        f"CUDA API calls take {share:.0f}% of each step",
        "The host spends this share of the step inside CUDA runtime or driver calls "
        "(launches, allocations, copies, syncs) while no op or data loading runs. The trace "
        "has no device events, so what the GPU did meanwhile is unknown.",
        evidence, share, "upper bound: the calls made asynchronous, fewer, or removed",
        RECORD_GPU,
    )
