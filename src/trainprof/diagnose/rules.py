"""The rules: one small function per finding id, each threshold a named constant.

A rank rule takes one ``RankAnalysis`` and returns a ``Finding`` or None; a job rule takes the
whole ``Analysis`` and returns a list. docs/rules.md explains every threshold and estimate.
"""

from __future__ import annotations

from collections.abc import Callable

from trainprof.analysis.overview import Analysis, RankAnalysis
from trainprof.diagnose import fixes
from trainprof.diagnose.findings import Evidence, Finding, Severity

# data_loading: waiting for the next batch while nothing else runs.
DATA_LOADING_PCT = 5.0
DATA_LOADING_MEDIUM_PCT = 10.0
DATA_LOADING_HIGH_PCT = 20.0
# host_bound: the GPU idles while the host executes ops or launch calls.
HOST_BOUND_PCT = 20.0
HOST_BOUND_HIGH_PCT = 40.0
# optimizer_overhead: the optimizer step's share of the step, and the share a multi-tensor or
# fused implementation typically removes (an estimate, see docs/rules.md).
OPTIMIZER_PCT = 15.0
OPTIMIZER_HIGH_PCT = 30.0
OPTIMIZER_RECOVERABLE = 0.5
# communication_exposed: communication with no compute running, as a share of the step.
EXPOSED_COMM_PCT = 15.0
EXPOSED_COMM_HIGH_PCT = 30.0
# step_variance: coefficient of variation of step times, and what counts as a slow step.
STEP_CV = 0.10
STEP_CV_HIGH = 0.30
SLOW_STEP_FACTOR = 1.2


def _severity(value: float, medium: float, high: float) -> Severity:
    return "high" if value > high else "medium" if value > medium else "low"


def _where(r: RankAnalysis) -> str:
    return f"rank {r.rank}" + (f", window {r.window}" if r.window else "")


def _ms(r: RankAnalysis, pct: float) -> float:
    return r.steps["mean_ms"] * pct / 100.0


def data_loading(r: RankAnalysis) -> Finding | None:
    # On a GPU run only the wait nothing overlaps costs time (the breakdown's DataLoader); on a
    # CPU run the data phase is the wait.
    gpu = r.gpu is not None
    share = r.breakdown_pct["dataloader"] if gpu else r.phases_pct["data"]
    if share <= DATA_LOADING_PCT:
        return None
    measure = "DataLoader time with nothing else running" if gpu else "data phase"
    return Finding(
        id="data_loading",
        severity=_severity(share, DATA_LOADING_MEDIUM_PCT, DATA_LOADING_HIGH_PCT),
        rank=r.rank,
        window=r.window,
        title=f"Waiting for data takes {share:.0f}% of each step",
        explanation=(
            "The training loop waits for the next batch: the DataLoader prepares batches in the "
            "main process (or its workers cannot keep up), and the device sits idle meanwhile."
        ),
        evidence=[
            Evidence(measure, share, "%", _where(r)),
            Evidence("mean wait per step", _ms(r, share), "ms", _where(r)),
            Evidence("mean step time", r.steps["mean_ms"], "ms", _where(r)),
        ],
        saving_pct=share,
        saving_ms=_ms(r, share),
        saving_assumption="batches prepared in background workers fully overlap the step",
        fix=fixes.DATA_LOADING,
    )


def host_bound(r: RankAnalysis) -> Finding | None:
    if r.gpu is None or r.timeline is None:
        return None
    host = r.breakdown_pct["cpu_exec"] + r.breakdown_pct["runtime"]
    if host <= HOST_BOUND_PCT:
        return None
    return Finding(
        id="host_bound",
        severity=_severity(host, HOST_BOUND_PCT, HOST_BOUND_HIGH_PCT),
        rank=r.rank,
        window=r.window,
        title=f"The GPU waits on the CPU for {host:.0f}% of each step",
        explanation=(
            "For this share of the step the host is running Python, operators or launch calls "
            "while no kernel runs: the GPU finishes work faster than the CPU can issue it."
        ),
        evidence=[
            Evidence("host work while the GPU is idle (CPU Exec + Runtime)", host, "%", _where(r)),
            Evidence("GPU idle over the step window", r.timeline.idle_pct, "%", _where(r)),
            Evidence("GPU utilisation", r.gpu.utilization_pct, "%", _where(r)),
        ],
        saving_pct=host,
        saving_ms=_ms(r, host),
        saving_assumption="upper bound: the host work is overlapped with GPU work or removed",
        fix=fixes.HOST_BOUND,
    )


def optimizer_overhead(r: RankAnalysis) -> Finding | None:
    share = r.phases_pct["optimizer"]
    if share <= OPTIMIZER_PCT:
        return None
    saving = share * OPTIMIZER_RECOVERABLE
    return Finding(
        id="optimizer_overhead",
        severity=_severity(share, OPTIMIZER_PCT, OPTIMIZER_HIGH_PCT),
        rank=r.rank,
        window=r.window,
        title=f"The optimizer step takes {share:.0f}% of each step",
        explanation=(
            "Updating the parameters costs a large share of the step. A per-parameter loop "
            "(for-loop implementation, many small tensors) pays Python and launch overhead for "
            "every tensor; the foreach or fused implementations update them in a few kernels."
        ),
        evidence=[
            Evidence("optimizer phase", share, "%", _where(r)),
            Evidence("optimizer time per step", r.phases_ms["optimizer"], "ms", _where(r)),
        ],
        saving_pct=saving,
        saving_ms=_ms(r, saving),
        saving_assumption=f"a multi-tensor or fused optimizer removes "
        f"{OPTIMIZER_RECOVERABLE:.0%} of the optimizer time",
        fix=fixes.OPTIMIZER,
    )


def communication_exposed(r: RankAnalysis) -> Finding | None:
    tl = r.timeline
    if tl is None or tl.exposed_communication_pct <= EXPOSED_COMM_PCT:
        return None
    share = tl.exposed_communication_pct
    return Finding(
        id="communication_exposed",
        severity=_severity(share, EXPOSED_COMM_PCT, EXPOSED_COMM_HIGH_PCT),
        rank=r.rank,
        window=r.window,
        title=f"Communication not hidden under compute takes {share:.0f}% of each step",
        explanation=(
            "Collectives (gradient all-reduce and others) run while no compute kernel does, so "
            "the step pays for them in full instead of overlapping them with the backward pass."
        ),
        evidence=[
            Evidence("exposed communication", share, "%", _where(r)),
            Evidence("all communication", tl.communication_pct, "%", _where(r)),
            Evidence("communication hidden by compute",
                     tl.comm_comp_overlap_pct if tl.comm_comp_overlap_pct is not None else 0.0,
                     "%", _where(r)),
        ],
        saving_pct=share,
        saving_ms=_ms(r, share),
        saving_assumption="upper bound: all communication overlapped with compute",
        fix=fixes.COMMUNICATION,
    )


def step_variance(r: RankAnalysis) -> Finding | None:
    s = r.steps
    if s["count"] < 3 or s["cv"] <= STEP_CV:
        return None
    median = s["median_ms"]
    slow = [p for p in s["per_step"] if p["ms"] > median * SLOW_STEP_FACTOR]
    saving_ms = sum(p["ms"] - median for p in slow) / s["count"]
    saving_pct = saving_ms / s["mean_ms"] * 100 if s["mean_ms"] else 0.0
    names = ", ".join(f"#{p['step']} ({p['ms']:.1f} ms)" for p in slow[:5])
    return Finding(
        id="step_variance",
        severity=_severity(s["cv"], STEP_CV, STEP_CV_HIGH),
        rank=r.rank,
        window=r.window,
        title=f"Step times vary by {s['cv'] * 100:.0f}% (coefficient of variation)",
        explanation=(
            "Some steps take much longer than the median: periodic work (evaluation, "
            "checkpointing, logging, garbage collection, recompilation) or contention."
        ),
        evidence=[
            Evidence("coefficient of variation", s["cv"] * 100, "%", _where(r)),
            Evidence("median step", median, "ms", _where(r)),
            Evidence("slow steps", names or "none above threshold", "", _where(r)),
        ],
        saving_pct=saving_pct,
        saving_ms=saving_ms,
        saving_assumption="the slow steps run as fast as the median step",
        fix=fixes.STEP_VARIANCE,
    )


RANK_RULES: list[Callable[[RankAnalysis], Finding | None]] = [
    data_loading,
    host_bound,
    optimizer_overhead,
    communication_exposed,
    step_variance,
]
JOB_RULES: list[Callable[[Analysis], list[Finding]]] = []
