"""Rules about device memory: too full, too empty, growing, fragmented.

Memory findings are risks and opportunities more than step time: their saving is 0 unless
time is measurably spent (allocator calls), and the explanation says what is at stake.
"""

from __future__ import annotations

from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections.memory import DeviceMemory
from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import Evidence, Finding, Fix, saving_severity
from trainprof.diagnose.rules.common import rank_finding, where
from trainprof.diagnose.verdicts import HEADROOM_PCT, PRESSURE_PCT  # noqa: F401

# memory_pressure / memory_headroom: the verdicts and thresholds are in diagnose/verdicts.py.
# memory_growth: analysis/sections/memory_series.py decides a leak (>= 1 MB/step, rising in 75% of
# steps); it is high from this growth per step.
GROWTH_HIGH_MB_PER_STEP = 10.0
# memory_fragmentation: reserved / allocated at the peak, or allocator calls in the steps.
FRAGMENTATION_RATIO = 1.5
ALLOCATOR_CALLS_PER_STEP = 1.0
ALLOCATOR_MIN_PCT = 1.0
_MB = 1e6
_GB = 1e9

SAVE_MEMORY = Fix(
    summary=(
        "Free memory before it runs out: activation checkpointing, mixed precision, a smaller "
        "micro-batch with gradient accumulation, or sharding (FSDP/ZeRO)."
    ),
    pytorch=(
        "from torch.utils.checkpoint import checkpoint\n"
        "h = checkpoint(block, h, use_reentrant=False)\n"
        "with torch.autocast('cuda', dtype=torch.bfloat16): ..."
    ),
    accelerate=(
        "accelerator = Accelerator(mixed_precision='bf16', gradient_accumulation_steps=2)\n"
        "model.gradient_checkpointing_enable()   # Hugging Face models"
    ),
)
USE_HEADROOM = Fix(
    summary=(
        "Use the free memory: a larger batch (fewer, fuller kernels, fewer optimizer steps per "
        "epoch), or drop checkpointing/offloading that trades speed for memory."
    ),
    pytorch="loader = DataLoader(dataset, batch_size=2 * bs, ...)   # and scale the lr",
    accelerate="loader = DataLoader(dataset, batch_size=2 * bs)   # before accelerator.prepare",
)
NO_LEAK = Fix(
    summary=(
        "Do not keep tensors that carry their graph across steps: store loss.item() or "
        "loss.detach(), and compute metrics under torch.no_grad()."
    ),
    pytorch=(
        "losses.append(loss.item())        # not losses.append(loss)\n"
        "with torch.no_grad():\n"
        "    metric = evaluate(model, x)"
    ),
    accelerate="losses.append(accelerator.gather(loss.detach()).mean().item())",
)
STEADY_ALLOCATOR = Fix(
    summary=(
        "Let the caching allocator reuse memory: expandable segments, no empty_cache() in the "
        "loop, steady shapes (pad to a few bucket sizes). A window of the first steps also "
        "shows start-up allocations: record later steps."
    ),
    pytorch=(
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
        "# and remove torch.cuda.empty_cache() from the training loop"
    ),
)


def _cuda(r: RankAnalysis) -> list[DeviceMemory]:
    memory = r.sections.memory
    return [d for d in (memory.devices if memory else []) if d.peak_pct_of_device is not None]


def _pct(d: DeviceMemory) -> float:
    """The peak's share of the device (known for every device ``_cuda`` keeps)."""
    return d.peak_pct_of_device or 0.0


def _peak(d: DeviceMemory) -> Evidence:
    return Evidence("peak allocated, of the device's memory", _pct(d), "%",
                    f"{d.device}: {(d.peak_allocated or 0.0) / _GB:.2f} of {(d.device_total or 0.0) / _GB:.1f} GB"
                    + (f", step {d.peak_step}" if d.peak_step is not None else "")
                    + (f", in {d.peak_op}" if d.peak_op else ""))


def _share(pct: float) -> str:
    """A share of the device for a title: "0.1%" rather than a misleading "0%"."""
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.1f}%" if pct >= 0.1 else "under 0.1%"


def memory_pressure(r: RankAnalysis) -> Finding | None:
    full = [d for d in _cuda(r)
            if verdicts.memory_pressure(verdicts.DeviceMemory(_pct(d)))]
    if not full:
        return None
    d = max(full, key=_pct)
    return rank_finding(
        r, "memory_pressure", "high",
        f"Memory peaks at {_pct(d):.0f}% of {d.device}",
        "The peak leaves almost no room: a longer sequence or a fragmented cache means an "
        "out-of-memory error, and the allocator may already free and retry (slow).",
        [_peak(d)], 0.0, "a risk, not step time: no saving is estimated", SAVE_MEMORY,
        **({"step": d.peak_step} if d.peak_step is not None else {}),
    )


def memory_headroom(r: RankAnalysis) -> Finding | None:
    spare = [d for d in _cuda(r)
            if verdicts.memory_headroom(verdicts.DeviceMemory(_pct(d)))]
    if not spare or len(spare) < len(_cuda(r)):
        return None
    d = max(spare, key=_pct)
    return rank_finding(
        r, "memory_headroom", "low",
        f"Memory peaks at {_share(_pct(d))} of {d.device}: room for a larger batch",
        "More than half of the device memory is never used; a larger batch would use it and "
        "give the GPU larger kernels.",
        [_peak(d)], 0.0, "an opportunity: the gain depends on the batch size chosen",
        USE_HEADROOM,
    )


def memory_growth(r: RankAnalysis) -> Finding | None:
    memory = r.sections.memory
    leaks = [d for d in (memory.devices if memory else []) if d.leak_suspected]
    if not leaks:
        return None
    d = max(leaks, key=lambda x: x.growth_mb_per_step or 0.0)
    growth = d.growth_mb_per_step or 0.0
    ends = d.step_end_allocated
    evidence = [
        Evidence("allocated memory grows", growth, "MB/step", where(r, d.device)),
        Evidence("steps in which it rose", (d.rising_share or 0.0) * 100, "%", where(r)),
        Evidence("allocated at the end of the steps",
                 f"{(ends[0].allocated / _MB):.1f} MB (step {ends[0].step}) to "
                 f"{(ends[-1].allocated / _MB):.1f} MB (step {ends[-1].step})", "",
                 where(r, d.device)),
        *[Evidence("allocating op", o.bytes / _MB, "MB", o.op) for o in d.top_ops[:2]],
    ]
    return rank_finding(
        r, "memory_growth", "high" if growth >= GROWTH_HIGH_MB_PER_STEP else "medium",
        f"Memory grows by {growth:.1f} MB every step on {d.device}",
        "Each step ends with more memory allocated than the last: tensors that keep their "
        "autograd graph (a loss or output stored across steps) hold their activations alive. "
        "The run slows as the allocator grows, then fails out of memory.",
        evidence, 0.0, "a leak costs memory, not step time, until it runs out", NO_LEAK,
    )


def memory_fragmentation(r: RankAnalysis) -> Finding | None:
    memory = r.sections.memory
    if memory is None:
        return None
    ratios = [d for d in memory.devices if (d.reserved_to_allocated or 0) >= FRAGMENTATION_RATIO]
    calls = memory.allocator
    busy = calls.per_step >= ALLOCATOR_CALLS_PER_STEP and (calls.time_pct or 0) >= ALLOCATOR_MIN_PCT
    if not ratios and not busy:
        return None
    share = calls.time_pct or 0.0
    evidence = [Evidence("reserved / allocated at the peak", d.reserved_to_allocated or 0.0, "x",
                         where(r, d.device)) for d in ratios]
    if calls.calls:
        evidence += [
            Evidence("allocator calls per step", calls.per_step, "",
                     where(r, ", ".join(calls.names))),
            Evidence("time in them", share, "% of the step", where(r)),
        ]
    return rank_finding(
        r, "memory_fragmentation", saving_severity(share),
        (f"The allocator calls cudaMalloc/cudaFree {calls.per_step:.0f} times per step"
         if busy else f"Reserved memory is {ratios[0].reserved_to_allocated:.1f}x what is "
         "allocated"),
        "The caching allocator holds much more than the tensors need (fragmented blocks), or "
        "keeps returning memory to the driver and asking again; cudaFree also synchronises.",
        evidence, share, "the allocator reuses its cache instead of calling the driver" if busy
        else "memory held but unused costs memory, not step time: no saving is estimated",
        STEADY_ALLOCATOR,
    )
