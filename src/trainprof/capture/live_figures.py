"""What the live view shows: the step timer's latest figures and the top finding they support.

The finding comes from the diagnosis rules' own thresholds (imported by name from
``diagnose.rules``, the one place capture reads the diagnose layer): the step timer sees the
phases, the spread of step times and the device memory, so it can tell data loading, an
optimizer-heavy step, uneven steps and memory pressure or headroom. Each is ranked like the
offline findings (``diagnose.findings.ranked``): largest saving first, then severity.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from trainprof.capture.device import peak_memory_bytes
from trainprof.capture.step_stats import PHASES, Window, per_second
from trainprof.diagnose.findings import Evidence, Finding, ranked
from trainprof.diagnose.rules.common import severity
from trainprof.diagnose.rules.host import (
    STEADY_STEPS,
    STEP_CV,
    STEP_VARIANCE_HIGH_PCT,
    STEP_VARIANCE_MEDIUM_PCT,
    STEP_VARIANCE_MIN_PCT,
)
from trainprof.diagnose.rules.input import (
    DATA_LOADING_HIGH_PCT,
    DATA_LOADING_MEDIUM_PCT,
    DATA_LOADING_PCT,
    WORKERS,
)
from trainprof.diagnose.rules.memory import HEADROOM_PCT, PRESSURE_PCT, SAVE_MEMORY, USE_HEADROOM
from trainprof.diagnose.rules.training import (
    MULTI_TENSOR,
    OPTIMIZER_HIGH_PCT,
    OPTIMIZER_PCT,
    OPTIMIZER_RECOVERABLE_FOREACH,
)

#: The live figures describe the latest this many measured steps.
RECENT_STEPS = 50
#: Steps drawn in the step-time sparkline.
SPARK_STEPS = 60


@dataclass
class LiveFigures:
    """The latest figures of one rank's step timer."""

    rank: int
    last_step: int  # the index of the last step the timer has seen
    measured: int  # steps in the statistics so far
    elapsed_s: float
    recent: Window
    recent_ms: list[float]
    median_ms: float
    p90_ms: float
    samples_per_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    peak_memory_bytes: int | None
    device_memory_bytes: int | None
    finding: Finding | None

    @property
    def mean_ms(self) -> float:
        return self.recent.total_ms / self.recent.steps

    def phase_pct(self) -> dict[str, float]:
        total = self.recent.total_ms or 1.0
        return {p: ms / total * 100.0 for p, ms in zip(PHASES, self.recent.phase_ms, strict=True)}


def figures_of(timer: Any, rank: int, elapsed_s: float) -> LiveFigures | None:
    """The timer's figures over its latest steps; None before the first measured step."""
    stats = timer._stats
    if not stats.steps:
        return None
    start = max(0, stats.steps - RECENT_STEPS)
    recent = stats.window(start)
    times = sorted(s * 1e3 for s in stats.column(0, start))
    peak = peak_memory_bytes(timer.device)
    total = device_memory(timer.device)
    figures = LiveFigures(
        rank=rank, last_step=timer._next_index - 1, measured=stats.steps, elapsed_s=elapsed_s,
        recent=recent, recent_ms=[s * 1e3 for s in stats.column(0, max(0, stats.steps - SPARK_STEPS))],
        median_ms=statistics.median(times), p90_ms=times[min(len(times) - 1, int(0.9 * len(times)))],
        samples_per_s=per_second(recent.samples, recent), tokens_per_s=per_second(recent.tokens, recent),
        mfu=timer._mfu(recent), peak_memory_bytes=peak, device_memory_bytes=total, finding=None)
    figures.finding = top_finding(figures)
    return figures


def device_memory(device: torch.device) -> int | None:
    """The GPU's memory, for the share the memory rules judge; None on the CPU."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).total_memory)


def top_finding(f: LiveFigures) -> Finding | None:
    """The costliest finding the figures support, by the diagnosis rules' thresholds."""
    pct = f.phase_pct()
    found = []
    if pct["data"] > DATA_LOADING_PCT:
        found.append(_finding(f, "data_loading", severity(pct["data"], DATA_LOADING_MEDIUM_PCT,
                                                          DATA_LOADING_HIGH_PCT),
                              f"Waiting for data takes {pct['data']:.0f}% of each step",
                              pct["data"], WORKERS, ("data phase", pct["data"], "%")))
    if pct["optimizer"] > OPTIMIZER_PCT:
        share = pct["optimizer"]
        found.append(_finding(f, "optimizer_overhead", severity(share, OPTIMIZER_PCT,
                                                                OPTIMIZER_HIGH_PCT),
                              f"The optimizer step takes {share:.0f}% of each step",
                              share * OPTIMIZER_RECOVERABLE_FOREACH, MULTI_TENSOR,
                              ("optimizer phase", share, "%")))
    variance = _uneven_steps(f)
    if variance is not None:
        found.append(variance)
    memory = _memory_finding(f)
    if memory is not None:
        found.append(memory)
    return ranked(found)[0] if found else None


def _uneven_steps(f: LiveFigures) -> Finding | None:
    """step_variance: the spread over STEP_CV, and the mean's excess over the median (what the
    slow steps cost) at least STEP_VARIANCE_MIN_PCT of the mean."""
    if len(f.recent_ms) < 3:
        return None
    cv = statistics.pstdev(f.recent_ms) / statistics.fmean(f.recent_ms)
    excess = (f.mean_ms - f.median_ms) / f.mean_ms * 100.0
    if cv <= STEP_CV or excess < STEP_VARIANCE_MIN_PCT:
        return None
    return _finding(f, "step_variance", severity(excess, STEP_VARIANCE_MEDIUM_PCT,
                                                 STEP_VARIANCE_HIGH_PCT),
                    f"Step times vary by {cv * 100:.0f}%", excess, STEADY_STEPS,
                    ("coefficient of variation", cv * 100, "%"))


def _memory_finding(f: LiveFigures) -> Finding | None:
    """memory_pressure / memory_headroom: the peak as a share of the GPU's memory."""
    if not f.peak_memory_bytes or not f.device_memory_bytes:
        return None
    share = f.peak_memory_bytes / f.device_memory_bytes * 100.0
    if share >= PRESSURE_PCT:
        return _finding(f, "memory_pressure", "high", f"Memory peaks at {share:.0f}% of the GPU",
                        0.0, SAVE_MEMORY, ("peak memory", share, "%"))
    if share < HEADROOM_PCT:
        return _finding(f, "memory_headroom", "low",
                        f"Memory peaks at {share:.0f}% of the GPU: room for a larger batch",
                        0.0, USE_HEADROOM, ("peak memory", share, "%"))
    return None


def _finding(f: LiveFigures, id: str, sev: Any, title: str, saving_pct: float, fix: Any,
             evidence: tuple[str, float, str]) -> Finding:
    where = f"rank {f.rank}, last {f.recent.steps} steps"
    return Finding(id=id, severity=sev, rank=f.rank, title=title, explanation="",
                   evidence=[Evidence(*evidence, where)], saving_pct=saving_pct,
                   saving_ms=f.mean_ms * saving_pct / 100.0,
                   saving_assumption="from the step timer's figures", fix=fix)
