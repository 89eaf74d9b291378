"""What the live view shows: the step timer's latest figures and the top finding they support.

The finding is decided by ``diagnose/verdicts.py``, the same functions the offline rules, the
checklist and the snapshot report ask: the step timer sees the phases, the spread of step times
(the same slow-step rule as a trace, ``analysis/overview/step_spread.py``) and the device memory, so it
can tell data loading, an optimizer-heavy step, uneven steps and memory pressure or headroom.
Each is ranked like the offline findings (``diagnose.findings.ranked``).
"""

from __future__ import annotations

import statistics
from typing import Any

import msgspec
import torch

from trainprof.analysis.overview.step_spread import step_spread
from trainprof.capture.device import peak_memory_bytes
from trainprof.capture.step_times import PHASES, Window, per_second
from trainprof.diagnose import verdicts
from trainprof.diagnose.findings import Evidence, Finding, ranked
from trainprof.diagnose.fixes import fix_for

#: The live figures describe the latest this many measured steps.
RECENT_STEPS = 50
#: Steps drawn in the step-time sparkline.
SPARK_STEPS = 60


class LiveFigures(msgspec.Struct):
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
    view = timer.recent(RECENT_STEPS, SPARK_STEPS)
    if view is None:
        return None
    recent = view.window
    times = sorted(view.step_ms)
    figures = LiveFigures(
        rank=rank, last_step=view.last_step, measured=view.measured, elapsed_s=elapsed_s,
        recent=recent, recent_ms=list(view.spark_ms), median_ms=statistics.median(times),
        p90_ms=times[min(len(times) - 1, int(0.9 * len(times)))],
        samples_per_s=per_second(recent.samples, recent), tokens_per_s=per_second(recent.tokens, recent),
        mfu=view.mfu, peak_memory_bytes=peak_memory_bytes(timer.device),
        device_memory_bytes=device_memory(timer.device), finding=None)
    figures.finding = top_finding(figures, view)
    return figures


def device_memory(device: torch.device) -> int | None:
    """The GPU's memory, for the share the memory rules judge; None on the CPU."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.get_device_properties(device).total_memory)


# -- the adapter: the timer's figures as the verdicts' facts (diagnose/verdicts.py) -----------


def live_verdicts(f: LiveFigures, view: Any) -> list[verdicts.Verdict]:
    """Every verdict the step timer's figures support, decided by diagnose/verdicts.py."""
    pct = f.phase_pct()
    memory_pct = (f.peak_memory_bytes / f.device_memory_bytes * 100.0
                  if f.peak_memory_bytes and f.device_memory_bytes else None)
    found = [
        verdicts.data_loading(verdicts.DataWait(pct["data"])),
        verdicts.optimizer_overhead(verdicts.OptimizerFacts(
            pct["optimizer"], None, getattr(view, "optimizer", None),
            getattr(view, "optimizer_implementation", None))),
        verdicts.step_variance(step_spread(getattr(view, "step_ms", f.recent_ms),
                                           last_is_flush=False)),
        verdicts.memory_pressure(verdicts.DeviceMemory(memory_pct)),
        verdicts.memory_headroom(verdicts.DeviceMemory(memory_pct)),
    ]
    return [v for v in found if v is not None]


_TITLES = {
    "data_loading": "Waiting for data takes {:.0f}% of each step",
    "optimizer_overhead": "The optimizer step takes {:.0f}% of each step",
    "step_variance": "Step times vary by {:.0f}%",
    "memory_pressure": "Memory peaks at {:.0f}% of the GPU",
    "memory_headroom": "Memory peaks at {:.0f}% of the GPU: room for a larger batch",
}
_EVIDENCE = {"data_loading": "data phase", "optimizer_overhead": "optimizer phase",
             "step_variance": "coefficient of variation", "memory_pressure": "peak memory",
             "memory_headroom": "peak memory"}


def top_finding(f: LiveFigures, view: Any = None) -> Finding | None:
    """The costliest finding the figures support, ranked like the offline findings."""
    found = [_finding(f, v) for v in live_verdicts(f, view)]
    return ranked(found)[0] if found else None


def _finding(f: LiveFigures, v: verdicts.Verdict) -> Finding:
    where = f"rank {f.rank}, last {f.recent.steps} steps"
    return Finding(id=v.id, severity=v.severity, rank=f.rank,
                   title=_TITLES[v.id].format(v.measure_pct), explanation="",
                   evidence=[Evidence(_EVIDENCE[v.id], v.measure_pct, "%", where)],
                   saving_pct=v.saving_pct, saving_ms=f.mean_ms * v.saving_pct / 100.0,
                   saving_assumption="from the step timer's figures", fix=fix_for(v.id))
