"""How uneven step times are: the robust slow-step rule, shared by the trace analysis
(``analysis/overview/steps.py``), the step timer's live view and the step_variance verdict, so that a
recorded window and a live window call the same steps slow."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from trainprof.stats import robust_sigma

#: A step is slow when it takes longer than the median plus SLOW_STEP_SIGMAS robust standard
#: deviations (1.4826 x the median absolute deviation), and at least SLOW_STEP_MIN_RATIO x the
#: median (so that a very steady run does not call a 1% wobble slow).
SLOW_STEP_SIGMAS = 3.0
SLOW_STEP_MIN_RATIO = 1.2


class StepSpread(msgspec.Struct, frozen=True):
    """The spread of a run of step times (ms) and its slow steps."""

    count: int
    cv: float
    median_ms: float
    mean_ms: float
    slow_steps: tuple[int, ...]  # the slow steps' numbers
    slow_episodes: int  # runs of consecutive slow steps
    slow_excess_ms: float  # the slow steps' excess over the median, per step

    @property
    def slow_excess_pct(self) -> float:
        """What the slow steps cost, as a share of the mean step."""
        return self.slow_excess_ms / self.mean_ms * 100.0 if self.mean_ms > 0 else 0.0


def step_spread(ms: Sequence[float] | np.ndarray, numbers: Sequence[int] | np.ndarray | None = None,
                last_is_flush: bool = True) -> StepSpread:
    """The spread of ``ms`` (step times, numbered by ``numbers``, default 0, 1, ...).
    ``last_is_flush``: the last step of a profiler window is never called slow (the profiler's
    stop flushes the recording inside it; HTA drops it too)."""
    ms = np.asarray(ms, dtype=np.float64)
    numbers = np.arange(len(ms)) if numbers is None else np.asarray(numbers)
    if not len(ms):
        return StepSpread(0, 0.0, 0.0, 0.0, (), 0, 0.0)
    mean = float(ms.mean())
    median = float(np.median(ms))
    sigma = robust_sigma(ms, median)
    slow = ms > max(median + SLOW_STEP_SIGMAS * sigma, SLOW_STEP_MIN_RATIO * median)
    if last_is_flush:
        slow[-1] = False
    slow_numbers = numbers[slow]
    return StepSpread(
        count=int(len(ms)), cv=float(ms.std() / mean) if mean > 0 else 0.0, median_ms=median,
        mean_ms=mean, slow_steps=tuple(int(s) for s in slow_numbers),
        slow_episodes=int(len(slow_numbers) - (np.diff(slow_numbers) == 1).sum()),
        slow_excess_ms=float((ms[slow] - median).sum()) / len(ms))
