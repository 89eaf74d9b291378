"""Each verdict decided once: whether a finding fires, how severe it is and what it saves.

The offline rules (``diagnose/rules``), the live view (``capture/live_figures.py``), the quick
checklist (``bench/health.py``) and the memory-snapshot report (``diagnose/snapshot.py``) see
the same things through different instruments: a recorded trace, the step timer's window, phase
timings, an allocator snapshot. Each builds the small fact objects below from what it has (an
*adapter*) and asks the functions here, so one run cannot get three verdicts. The thresholds are
the rules' own (docs/rules.md); the rules only add evidence and words around these verdicts.
"""

from __future__ import annotations

import msgspec

from trainprof.analysis.overview.step_spread import StepSpread
from trainprof.diagnose.findings import Severity, saving_severity

# Every verdict's severity is its saving's (findings.SAVING_SEVERITY), as in the offline rules.
# data_loading: waiting for the next batch while nothing else runs (the plugin's 5%).
DATA_LOADING_PCT = 5.0
# optimizer_overhead: the optimizer phase, when it is made of per-tensor ops.
OPTIMIZER_PCT = 15.0
#: Ops per optimizer step from which the step is paying per tensor (a fused step: a handful).
OPT_PER_TENSOR_OPS = 100
#: The share of the optimizer time a fused implementation removes (optimizers that have one:
#: FUSED_OPTIMIZERS), else a multi-tensor (foreach) one. Measured on the CPU pathology run,
#: Adam over 406 tensors: fused removes 60-87%, foreach 45% (docs/rules.md).
OPTIMIZER_RECOVERABLE_FUSED = 0.75
OPTIMIZER_RECOVERABLE_FOREACH = 0.45
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
# step_variance: coefficient of variation over STEP_CV, at least two separate episodes of slow
# steps (one burst is contention, or the first step after warm-up), and their excess over the
# median (% of the mean step) at least STEP_VARIANCE_MIN_PCT.
STEP_CV = 0.10
STEP_VARIANCE_MIN_SLOW = 2
STEP_VARIANCE_MIN_PCT = 2.0
# memory_pressure / memory_headroom: the peak as a share of the device's memory.
PRESSURE_PCT = 90.0
HEADROOM_PCT = 50.0


class Verdict(msgspec.Struct, frozen=True):
    """A finding decided: its rule, severity, the share it was judged on and its saving (% of
    the mean step)."""

    id: str
    severity: Severity
    measure_pct: float
    saving_pct: float


# -- facts ------------------------------------------------------------------------------------


class DataWait(msgspec.Struct, frozen=True):
    """The share of the step spent waiting for the next batch with nothing else running."""

    share_pct: float


class OptimizerFacts(msgspec.Struct, frozen=True):
    """The optimizer's share of the step, and what its step is made of when known."""

    share_pct: float
    ops_per_step: float | None = None  # None: not counted (step timer, checklist)
    name: str | None = None  # "AdamW"
    implementation: str | None = None  # "for-loop", "foreach" or "fused"


class DeviceMemory(msgspec.Struct, frozen=True):
    """A device's peak memory as a share of its capacity (None: unknown)."""

    peak_pct: float | None


# -- verdicts ---------------------------------------------------------------------------------


def data_loading(f: DataWait) -> Verdict | None:
    if f.share_pct <= DATA_LOADING_PCT:
        return None
    return Verdict("data_loading", saving_severity(f.share_pct), f.share_pct, f.share_pct)


def optimizer_recoverable(f: OptimizerFacts) -> float:
    """The share of the optimizer time a better step removes: fused where the optimizer has a
    fused step it does not use, else multi-tensor."""
    fused = f.name in FUSED_OPTIMIZERS and f.implementation != "fused"
    return OPTIMIZER_RECOVERABLE_FUSED if fused else OPTIMIZER_RECOVERABLE_FOREACH


def optimizer_overhead(f: OptimizerFacts) -> Verdict | None:
    """Fires over OPTIMIZER_PCT when the step pays per tensor: OPT_PER_TENSOR_OPS ops or more
    where the ops were counted (a trace); where they were not (the step timer, the checklist),
    when the step is not a multi-tensor or fused one, which run in a few kernels."""
    if f.share_pct <= OPTIMIZER_PCT:
        return None
    if f.ops_per_step is not None and f.ops_per_step < OPT_PER_TENSOR_OPS:
        return None
    if f.ops_per_step is None and f.implementation in ("fused", "foreach"):
        return None
    saving = f.share_pct * optimizer_recoverable(f)
    return Verdict("optimizer_overhead", saving_severity(saving), f.share_pct, saving)


def step_variance(f: StepSpread) -> Verdict | None:
    saving = f.slow_excess_pct
    if (f.count < 3 or f.cv <= STEP_CV or saving < STEP_VARIANCE_MIN_PCT
            or f.slow_episodes < STEP_VARIANCE_MIN_SLOW):
        return None
    return Verdict("step_variance", saving_severity(saving), f.cv * 100.0, saving)


def memory_pressure(f: DeviceMemory) -> Verdict | None:
    """A risk, not step time: no saving."""
    if f.peak_pct is None or f.peak_pct < PRESSURE_PCT:
        return None
    return Verdict("memory_pressure", "high", f.peak_pct, 0.0)


def memory_headroom(f: DeviceMemory) -> Verdict | None:
    """An opportunity: no saving is estimated (it depends on the batch chosen)."""
    if f.peak_pct is None or f.peak_pct >= HEADROOM_PCT:
        return None
    return Verdict("memory_headroom", "low", f.peak_pct, 0.0)
