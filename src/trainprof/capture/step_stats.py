"""Running totals for the step timer, and the numbers and log line made from them."""

from __future__ import annotations

import statistics
from array import array
from dataclasses import dataclass, field

PHASES = ("data", "forward", "backward", "optimizer", "other")


@dataclass
class Window:
    """Sums over a run of measured steps: their count, total ms, ms per phase, samples."""

    steps: int = 0
    total_ms: float = 0.0
    phase_ms: list[float] = field(default_factory=lambda: [0.0] * len(PHASES))
    samples: int = 0

    def add(self, step_ms: float, phases: list[float], samples: int | None) -> None:
        self.steps += 1
        self.total_ms += step_ms
        for i, value in enumerate(phases):
            self.phase_ms[i] += value
        self.samples += samples or 0


class StepStats:
    """Every measured step's time (8 bytes each) and the sums that the summary needs."""

    def __init__(self) -> None:
        self.step_ms = array("d")
        self.all = Window()
        self._logged = Window()  # a copy of `all` when the last log line was made
        self.samples: int | None = 0
        self.tokens: int | None = 0

    def add(self, step_ms: float, phases: list[float], samples: int | None, tokens: int | None) -> None:
        self.step_ms.append(step_ms)
        self.all.add(step_ms, phases, samples)
        # One step of unknown size makes the total unknown, rather than quietly too small.
        self.samples = None if self.samples is None or samples is None else self.samples + samples
        self.tokens = None if self.tokens is None or tokens is None else self.tokens + tokens

    @property
    def steps_since_log(self) -> int:
        return self.all.steps - self._logged.steps

    def take_recent(self) -> Window:
        """The steps since the last call, as one window."""
        now, before = self.all, self._logged
        self._logged = Window(now.steps, now.total_ms, list(now.phase_ms), now.samples)
        return Window(
            now.steps - before.steps,
            now.total_ms - before.total_ms,
            [a - b for a, b in zip(now.phase_ms, before.phase_ms)],
            now.samples - before.samples,
        )

    @property
    def seconds(self) -> float:
        return self.all.total_ms / 1e3

    def distribution(self) -> dict[str, float] | None:
        if not self.step_ms:
            return None
        ordered = sorted(self.step_ms)
        return {
            "mean": statistics.fmean(ordered),
            "median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "min": ordered[0],
            "max": ordered[-1],
        }

    def phases_ms(self) -> dict[str, float | None]:
        steps = self.all.steps
        return {p: (self.all.phase_ms[i] / steps if steps else None) for i, p in enumerate(PHASES)}

    def per_second(self, count: int | None) -> float | None:
        return count / self.seconds if count and self.seconds > 0 else None


def log_line(last_index: int, window: Window, mfu: float | None) -> str:
    """`trainprof step 99: 52.1 ms/step (data 30.2, forward ...), 1228 samples/s, MFU 31.0%`."""
    mean = window.total_ms / window.steps
    phases = ", ".join(f"{p} {window.phase_ms[i] / window.steps:.1f}" for i, p in enumerate(PHASES))
    line = f"trainprof step {last_index}: {mean:.1f} ms/step ({phases})"
    if window.samples and window.total_ms > 0:
        line += f", {window.samples / (window.total_ms / 1e3):.0f} samples/s"
    if mfu is not None:
        line += f", MFU {mfu:.1%}"
    return line
