"""One cause, one saving: findings that measure the same time share a saving; a rank's distinct
savings never add up past its step; severity follows the saving.

``SAME_TIME`` is the one table of findings that measure the same time (docs/rules.md#savings
says why for each pair, and which pairs were checked and are distinct). ``settle`` runs on the
folded findings, most costly first: a finding paired with an earlier one on the same rank and
window names it (``saving_shared_with``) and is not counted again; the others are the rank's
distinct savings, each cut to what the ones before it leave of the step.
"""

from __future__ import annotations

from trainprof.diagnose.findings import (
    RISK_SEVERITY,
    SHARED_WITH,
    Evidence,
    Finding,
    capped,
    ranked,
    saving_severity,
)

#: Pairs of findings whose savings are (part of) the same time on a rank, with why.
SAME_TIME: dict[frozenset[str], str] = {
    frozenset(("communication_exposed", "slow_collectives")):
        "slow_collectives saves at most the exposed communication, the time "
        "communication_exposed measures",
    frozenset(("host_bound", "small_kernels")):
        "the GPU idle between back-to-back launches is part of the GPU idle on the host",
    frozenset(("host_bound", "sync_points")):
        "the GPU idle after a sync until the host launches again is GPU idle on the host",
    frozenset(("host_bound", "untraced_time")):
        "untraced gaps no other rule claims are GPU idle on the host",
    frozenset(("host_bound", "compilation")):
        "the GPU idles while the compiler runs on the host",
    frozenset(("host_bound", "memory_fragmentation")):
        "allocator calls are host time the GPU waits through",
    frozenset(("host_bound", "cuda_api_time")):
        "cuda_api_time stands in for host_bound when the trace has no device events",
    frozenset(("cuda_api_time", "memory_fragmentation")):
        "cudaMalloc and cudaFree are CUDA API calls",
    frozenset(("compilation", "untraced_time")):
        "a compiler outside the recorded ops leaves untraced time",
    frozenset(("compilation", "input_preprocessing")):
        "compiling before the step's first kernel is host work before the first GPU work",
    frozenset(("far_from_roofline", "no_tensor_cores")):
        "GEMMs off the Tensor Cores are the GEMMs far from their roofline",
    frozenset(("far_from_roofline", "attention_not_fused")):
        "the unfused softmax is a memory-bound op far from its roofline",
    frozenset(("far_from_roofline", "low_occupancy")):
        "kernels that leave SMs empty run far from their roofline",
    frozenset(("far_from_roofline", "wide_precision")):
        "fp64 kernels are among the op classes far from their (lower-precision) roofline",
    frozenset(("outside_training", "wide_precision")):
        "fp64 ops outside the training phases (an evaluation pass) are in both",
    frozenset(("outside_training", "logging_overhead")):
        "the Python glue between ops after the optimizer step is in both",
    frozenset(("communication_exposed", "tensor_parallel_communication")):
        "the tensor-parallel collectives on the critical path are communication with no "
        "compute beside it",
    frozenset(("expert_imbalance", "straggler")):
        "both are the other ranks waiting in their all-to-all for the overloaded expert rank, "
        "the one both findings are given to",
    frozenset(("pipeline_bubble", "pipeline_imbalance")):
        "both are the stages waiting in send/recv: the fill and drain grow with the heaviest "
        "stage's micro-batch time",
}
#: The most of a step a rank's distinct savings can add up to.
STEP_PCT = 100.0
#: The evidence a shared finding gets (taken off again when findings diagnosed elsewhere, a
#: cluster summary's, are settled anew).
SAME_TIME_EVIDENCE = "the same time as"


def same_time(a: str, b: str) -> bool:
    """Whether findings ``a`` and ``b`` on one rank measure the same time."""
    return frozenset((a, b)) in SAME_TIME


def _where(f: Finding) -> tuple[int | None, int]:
    return f.rank, f.window


def share(findings: list[Finding]) -> None:
    """Mark each finding paired with an earlier one (the list is most costly first) on the same
    rank and window: it names that finding and saves no more than it."""
    for f in findings:  # what an earlier settle (a cluster summary's ranks) decided
        f.extra.pop(SHARED_WITH, None)
        f.evidence = [e for e in f.evidence if e.what != SAME_TIME_EVIDENCE]
    for i, f in enumerate(findings):
        first = next((g for g in findings[:i]
                      if _where(g) == _where(f) and same_time(f.id, g.id)), None)
        if first is None:
            continue
        f.extra[SHARED_WITH] = first.id
        f.evidence.append(Evidence(SAME_TIME_EVIDENCE, first.id, "",
                                   SAME_TIME[frozenset((f.id, first.id))]))


def distinct(findings: list[Finding]) -> list[Finding]:
    """The findings whose saving is not an earlier one's time."""
    return [f for f in findings if SHARED_WITH not in f.extra]


def fit_in_step(findings: list[Finding]) -> None:
    """Cut each distinct saving, most costly first, to what the distinct savings before it on
    its rank and window leave of the step; a shared saving to the one it shares."""
    used: dict[tuple[int | None, int], float] = {}
    by_id = {f.id: f for f in findings}
    for f in findings:
        sharer = by_id.get(f.extra.get(SHARED_WITH, ""))
        left = sharer.saving_pct if sharer is not None else STEP_PCT - used.get(_where(f), 0.0)
        if f.saving_pct > left:
            if sharer is None:
                f.evidence.append(Evidence(f"saving capped by the step (was {f.saving_pct:.1f}%)",
                                           round(left, 1), "% of step",
                                           "the distinct savings before it fill the rest"))
                capped(f, "step")
            f.saving_ms = f.saving_ms * left / f.saving_pct
            f.saving_pct = max(left, 0.0)
        if sharer is None:
            used[_where(f)] = used.get(_where(f), 0.0) + f.saving_pct


def grade(findings: list[Finding]) -> None:
    """Severity from the saving (SAVING_SEVERITY), except for the risk rules."""
    for f in findings:
        if f.id not in RISK_SEVERITY:
            f.severity = saving_severity(f.saving_pct)


def settle(findings: list[Finding]) -> list[Finding]:
    """The folded findings, most costly first, with shared savings named, distinct savings
    fitting in the step and severities that follow the savings."""
    out = ranked(findings)
    share(out)
    fit_in_step(out)
    grade(out)
    return ranked(out)
