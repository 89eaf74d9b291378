"""Advice from a memory snapshot, as findings of the memory rules (`memory_pressure`,
`memory_fragmentation`, `memory_growth`): same ids, thresholds and fixes as for traces
(rules/memory.py), with the allocator settings that a snapshot can justify, and the fix for what
holds the peak (optimizer state, activations, gradients or parameters: `HOLDER_FIXES`).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from trainprof.analysis.snapshot.analyze import (
    DeviceState,
    OutOfMemory,
    SnapshotAnalysis,
    analyze_snapshot,
)
from trainprof.analysis.snapshot.holders import HOLDERS
from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import Evidence, Finding, Fix, Severity, ranked
from trainprof.diagnose.rules.memory import (
    FRAGMENTATION_RATIO,
    GROWTH_HIGH_MB_PER_STEP,
    NO_LEAK,
    SAVE_MEMORY,
    STEADY_ALLOCATOR,
)
from trainprof.trace.snapshot import SnapshotError, find_snapshot_files, load_snapshot

#: The JSON result of `trainprof memory --format json` (docs/memory_snapshots.md).
SCHEMA = "trainprof.memory_snapshot/1"

_MB = 1e6
#: memory_fragmentation from a snapshot also needs the free bytes in pieces: the largest free
#: block holds less than this share of the free bytes stranded in split segments.
SCATTERED_SHARE = 0.5
NO_SAVING = "a risk, not step time: no saving is estimated"
#: The fragmentation fix with what a snapshot shows: split blocks that no request fits.
UNSPLIT_CACHE = Fix(
    summary=(
        "Stop free memory being stranded in split blocks: expandable segments grow in place "
        "instead of splitting, max_split_size_mb keeps large free blocks whole; steady shapes "
        "(pad to a few bucket sizes) help either way."
    ),
    pytorch=(
        STEADY_ALLOCATOR.pytorch.splitlines()[0] + "\n"
        "# or, where expandable segments are not available:\n"
        "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 python train.py"
    ),
)


#: The largest holder of the peak is a finding (memory_pressure, low) when it holds at least
#: this share of the peak and this many bytes: below either, changing it would not move the peak
#: much, or not matter. It is medium from HOLDER_MEDIUM_SHARE (most of the peak).
HOLDER_SHARE = 0.4
HOLDER_MIN_BYTES = 1e9
HOLDER_MEDIUM_SHARE = 0.5
#: Holders a fix can target (not "other", "unknown").
NAMED_HOLDERS = HOLDERS[:4]
HOLDER_WORDS = {"parameters": "parameters", "gradients": "gradients",
                "optimizer_state": "optimizer state", "activations": "activations"}
#: What to change for each holder of the peak.
HOLDER_FIXES = {
    "optimizer_state": Fix(
        summary=(
            "Shrink or shard the optimizer state: an 8-bit optimizer keeps 2 bytes per "
            "parameter instead of Adam's 8; ZeRO-1/FSDP shards it across ranks; foreach=False "
            "avoids the multi-tensor step's temporary copies of every state at once."
        ),
        pytorch=(
            "import bitsandbytes as bnb\n"
            "optimizer = bnb.optim.AdamW8bit(model.parameters(), lr=3e-4)\n"
            "# or, on N GPUs: shard the state\n"
            "from torch.distributed.optim import ZeroRedundancyOptimizer\n"
            "optimizer = ZeroRedundancyOptimizer(model.parameters(), "
            "optimizer_class=torch.optim.AdamW, lr=3e-4)"
        ),
        accelerate="accelerate launch --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP train.py",
    ),
    "activations": Fix(
        summary=(
            "Keep fewer activations: activation checkpointing (recompute in backward), a smaller "
            "micro-batch with gradient accumulation, bf16 autocast."
        ),
        pytorch=(
            "from torch.utils.checkpoint import checkpoint\n"
            "h = checkpoint(block, h, use_reentrant=False)   # per transformer block\n"
            "with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x)"
        ),
        accelerate="model.gradient_checkpointing_enable()   # Hugging Face models",
    ),
    "gradients": Fix(
        summary=(
            "Hold gradients for less time or in less memory: step each parameter as soon as its "
            "gradient is accumulated (optimizer in backward), shard them (ZeRO-2/FSDP), and keep "
            "zero_grad(set_to_none=True)."
        ),
        pytorch=(
            "optimizers = {p: torch.optim.AdamW([p], lr=3e-4) for p in model.parameters()}\n"
            "for p in model.parameters():\n"
            "    p.register_post_accumulate_grad_hook(\n"
            "        lambda p: (optimizers[p].step(), optimizers[p].zero_grad()))"
        ),
        accelerate="accelerate launch --use_fsdp --fsdp_sharding_strategy SHARD_GRAD_OP train.py",
    ),
    "parameters": Fix(
        summary=(
            "Hold fewer parameter bytes per GPU: bf16 weights, FSDP/ZeRO-3 sharding, or CPU "
            "offload of what is not in use."
        ),
        pytorch=(
            "from torch.distributed.fsdp import fully_shard\n"
            "for block in model.layers: fully_shard(block)\n"
            "fully_shard(model)"
        ),
        accelerate="accelerate launch --use_fsdp --fsdp_sharding_strategy FULL_SHARD train.py",
    ),
}


def memory_snapshot_report(path: str | os.PathLike[str], trust: bool = False) -> dict[str, Any]:
    """Every snapshot at `path` (a file, or a folder's `*.pickle`) analysed, with its findings,
    as plain JSON values; `SnapshotError` when one cannot be read or is refused."""
    files = find_snapshot_files(path)
    if not files:
        raise SnapshotError(f"{path} holds no memory snapshot (*.pickle, *.pickle.gz).")
    return {"schema": SCHEMA, "snapshots": [snapshot_result(f, trust) for f in files]}


def snapshot_result(path: str | os.PathLike[str], trust: bool = False) -> dict[str, Any]:
    """One snapshot's analysis and findings, as plain JSON values."""
    snapshot = load_snapshot(path, trust)
    try:
        result = analyze_snapshot(snapshot, source=str(path))
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise SnapshotError(f"{path} has a segment, block or history entry that is not shaped "
                            f"like a memory snapshot's ({type(exc).__name__}: {exc}).") from None
    findings = snapshot_findings(result)
    out = {**result.to_dict(), "findings": [f.to_dict() for f in findings],
           "verdict": [holder_sentence(h) for h in largest_holders(result)]}
    if not any(f.id == "memory_fragmentation" for f in findings):
        out["notes"] = [*out.get("notes", []), *_not_fragmented(result)]
    return out


#: A share of reserved memory free in split segments from which the devices table's figure
#: needs a word when the rule finds no fragmentation (so the table does not contradict it).
SPLIT_FREE_NOTE_PCT = 50.0


def _not_fragmented(result: SnapshotAnalysis) -> list[str]:
    """Why a high share of free memory in split segments is no fragmentation finding."""
    notes = []
    for d in result.devices:
        pct = d.fragmentation_pct
        if pct is None or pct < SPLIT_FREE_NOTE_PCT:
            continue
        largest = max(d.largest_free.values())
        if largest >= SCATTERED_SHARE * d.inactive_split:
            why = (f"its largest free block ({_mb(largest)}) holds most of it, so any request "
                   "that fits the cache fits that block")
        else:
            why = (f"that is less than half of what is allocated ({_mb(d.allocated)}): the "
                   "cache is not much larger than the tensors need")
        notes.append(f"cuda:{d.device}: {pct:.1f}% of reserved memory is free in split "
                     f"segments, but {why}: not fragmentation (docs/memory_snapshots.md).")
    return notes


def snapshot_findings(result: SnapshotAnalysis) -> list[Finding]:
    """The memory findings a snapshot supports, most severe first."""
    rank = result.recorded_by.get("rank")
    rank = rank if isinstance(rank, int) else None
    found = [*_out_of_memory(result, rank), *_fragmented(result, rank), *_full(result, rank),
             *_growing(result, rank), *_largest_holder(result, rank)]
    firsts: dict[str, Finding] = {}
    for f in ranked(found):
        firsts.setdefault(f.id, f)
    return list(firsts.values())


def _finding(rule: str, severity: Severity, rank: int | None, title: str, explanation: str,
             evidence: list[Evidence], fix: Fix) -> Finding:
    return Finding(rule, severity, rank, title, explanation, evidence, 0.0, 0.0, NO_SAVING, fix)


def _mb(nbytes: float | None) -> str:
    """MB, or GB from a GB up (10^6 and 10^9 bytes)."""
    if nbytes is None:
        return "n/a"
    return f"{nbytes / 1e9:,.2f} GB" if nbytes >= 1e9 else f"{nbytes / _MB:,.1f} MB"


def _oom_evidence(o: OutOfMemory) -> list[Evidence]:
    where = f"cuda:{o.device}" if o.device is not None else ""
    return [Evidence("the failing request", _mb(o.requested), "", where),
            Evidence("largest free block in its pool", _mb(o.largest_free_block), "", where),
            Evidence("free blocks in the cache (its pool)", _mb(o.cached_free), "", where),
            Evidence("free on the device outside the cache", _mb(o.device_free), "", where)]


def _out_of_memory(result: SnapshotAnalysis, rank: int | None) -> list[Finding]:
    out = []
    for o in result.ooms:
        sites = [Evidence("live at the snapshot", _mb(s.bytes), "", s.site)
                 for s in result.live_sites[:2]]
        if o.cause == "fragmentation":
            out.append(_finding(
                "memory_fragmentation", "high", rank,
                f"Out of memory from fragmentation: {_mb(o.requested)} asked, the largest free "
                f"block {_mb(o.largest_free_block)}",
                "There was enough free memory in total, but split into blocks smaller than the "
                "request: the caching allocator could not serve it.",
                _oom_evidence(o) + sites, UNSPLIT_CACHE))
        elif o.cause == "capacity":
            out.append(_finding(
                "memory_pressure", "high", rank,
                f"Out of memory: {_mb(o.requested)} asked, too little free on the device",
                "Live tensors fill the device: even all free memory together would not hold the "
                "request. Hold fewer or smaller tensors at the peak.",
                _oom_evidence(o) + sites, holder_fix(result, o.device)))
        else:
            out.append(_finding(
                "memory_pressure", "high", rank, f"Out of memory: {_mb(o.requested)} asked",
                "The run failed out of memory; the snapshot was taken when a block large enough "
                "was free again, so it cannot tell fragmentation from capacity. Hold fewer or "
                "smaller tensors at the peak.", _oom_evidence(o) + sites, SAVE_MEMORY))
    return out


def _fragmented(result: SnapshotAnalysis, rank: int | None) -> list[Finding]:
    out = []
    for d in result.devices:
        if not d.allocated or (d.allocated + d.inactive_split) / d.allocated < FRAGMENTATION_RATIO:
            continue
        if max(d.largest_free.values()) >= SCATTERED_SHARE * d.inactive_split:
            continue  # one free block holds most of it: any request that fits the cache fits it
        out.append(_finding(
            "memory_fragmentation", "medium", rank,
            f"{_mb(d.inactive_split)} of cuda:{d.device}'s cache is free but stranded in split "
            "segments",
            "Free blocks inside segments that still hold live tensors cannot be returned by "
            "empty_cache() and serve only requests that fit them: reserved memory grows past "
            "what the tensors need, and a large request can fail with memory free.",
            _device_evidence(d), UNSPLIT_CACHE))
    return out


def _device_evidence(d: DeviceState) -> list[Evidence]:
    where = f"cuda:{d.device}"
    return [Evidence("free in split segments", _mb(d.inactive_split), "", where),
            Evidence("allocated", _mb(d.allocated), "", where),
            Evidence("reserved", _mb(d.reserved), "", where),
            Evidence("largest free block", _mb(max(d.largest_free.values())), "", where)]


def _full(result: SnapshotAnalysis, rank: int | None) -> list[Finding]:
    out = []
    for d in result.devices:
        pct = d.reserved_pct_of_device  # what a snapshot knows: the cache's share of the device
        if pct is None or verdicts.memory_pressure(verdicts.DeviceMemory(pct)) is None:
            continue
        out.append(_finding(
            "memory_pressure", "high", rank, f"Reserved memory is {pct:.0f}% of cuda:{d.device}",
            "The cache holds almost the whole device: a longer sequence or a fragmented cache "
            "means an out-of-memory error.",
            [Evidence("reserved, of the device's memory", pct, "%", f"cuda:{d.device}"),
             *_device_evidence(d)[1:3]], holder_fix(result, d.device)))
    return out


def _growing(result: SnapshotAnalysis, rank: int | None) -> list[Finding]:
    out = []
    for h in result.histories:
        if not h.leak_suspected:
            continue
        growth = h.growth_mb_per_step or 0.0
        evidence = [Evidence("live memory grows", growth, "MB/step", f"cuda:{h.device}"),
                    Evidence("steps in which it rose", (h.rising_share or 0.0) * 100, "%"),
                    *[Evidence("allocated over the history", _mb(s.bytes), "", s.site)
                      for s in result.allocated_sites[:2]]]
        out.append(_finding(
            "memory_growth", "high" if growth >= GROWTH_HIGH_MB_PER_STEP else "medium", rank,
            f"Live memory grows by {growth:.1f} MB every step on cuda:{h.device}",
            "Each step ends with more memory live than the last: something keeps tensors (often "
            "with their autograd graph) across steps, until the run fails out of memory.",
            evidence, NO_LEAK))
    return out


class Holder(NamedTuple):
    """The largest named holder of a device's peak (or of its live memory at the snapshot,
    without history): its bytes, the total they are a share of, when, and its largest site."""

    device: int
    name: str
    bytes: int
    total: int
    when: str
    site: str
    site_bytes: int

    @property
    def share(self) -> float:
        return self.bytes / self.total if self.total else 0.0


def largest_holders(result: SnapshotAnalysis) -> list[Holder]:
    """Per device, the largest of parameters, gradients, optimizer state and activations at the
    history's peak, or at the snapshot when there is no history."""
    out = []
    peaks = {p.device: p for p in result.peaks}
    for d in result.devices:
        peak = peaks.get(d.device)
        holders = peak.holders if peak else result.holders.get(d.device, {})
        sites = peak.holder_sites if peak else result.holder_sites.get(d.device, {})
        total = peak.live if peak else sum(holders.values())
        named = {k: v for k, v in holders.items() if k in NAMED_HOLDERS and v > 0}
        if not named or not total:
            continue
        name = max(named, key=lambda k: named[k])
        top = sites.get(name) or []
        out.append(Holder(d.device, name, named[name], total,
                          _peak_when(peak.ms, peak.step) if peak else "at the snapshot",
                          top[0].site if top else "", top[0].bytes if top else 0))
    return out


def _peak_when(ms: float | None, step: int | None) -> str:
    """`at its peak (12.5 ms into the history, step 3)`, with what is known of when."""
    parts = [f"{ms:,.1f} ms into the history"] if ms is not None else []
    parts += [f"step {step}"] if step is not None else []
    return f"at its peak ({', '.join(parts)})" if parts else "at its peak"


def holder_fix(result: SnapshotAnalysis, device: int | None) -> Fix:
    """The fix for what holds the device's peak, or the general one when no holder stands out."""
    for h in largest_holders(result):
        if h.device == device and h.share >= HOLDER_SHARE:
            return HOLDER_FIXES[h.name]
    return SAVE_MEMORY


def holder_sentence(h: Holder) -> str:
    """One sentence: what holds the device's memory, how much, and the user's line it came from."""
    what = HOLDER_WORDS[h.name]
    verb = "holds" if h.name == "optimizer_state" else "hold"
    where = f", most of it allocated at {h.site}" if h.site else ""
    return (f"cuda:{h.device} {h.when}: {what} {verb} {100 * h.share:.0f}% of the "
            f"{_mb(h.total)} live ({_mb(h.bytes)}){where} (estimated from the stacks).")


def _largest_holder(result: SnapshotAnalysis, rank: int | None) -> list[Finding]:
    out = []
    for h in largest_holders(result):
        if h.share < HOLDER_SHARE or h.bytes < HOLDER_MIN_BYTES:
            continue
        what = HOLDER_WORDS[h.name]
        out.append(_finding(
            "memory_pressure", "medium" if h.share >= HOLDER_MEDIUM_SHARE else "low", rank,
            f"{what.capitalize()} {'holds' if h.name == 'optimizer_state' else 'hold'} "
            f"{100 * h.share:.0f}% of cuda:{h.device}'s live memory {h.when}",
            "Judged from the stacks that allocated each live block (an estimate: "
            f"docs/memory_snapshots.md, Holders). Making the {what} smaller lowers the peak most.",
            [Evidence(what, _mb(h.bytes), "", f"cuda:{h.device}"),
             Evidence("live memory then", _mb(h.total), "", f"cuda:{h.device}"),
             *([Evidence("its largest site", _mb(h.site_bytes), "", h.site)] if h.site else [])],
            HOLDER_FIXES[h.name]))
    return out
