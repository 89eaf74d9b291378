"""The step timer's measurements and the numbers made from them.

Flat arrays of 8-byte numbers (about 60 bytes a step) keep each step's cost to a few appends;
sums and percentiles are computed only when a summary or a log line asks for them.
"""

from __future__ import annotations

import statistics
from array import array

import msgspec

from trainprof.vocabulary import PHASES


class Window(msgspec.Struct):
    """Totals over a run of measured steps."""

    steps: int
    total_ms: float
    phase_ms: list[float]
    samples: int | None
    tokens: int | None


class StepTimes:
    """Every measured step's time and phases in seconds, as rows of one flat column, with its
    samples and tokens."""

    _WIDTH = 1 + len(PHASES)  # step time, then the phases

    def __init__(self) -> None:
        self.rows = array("d")
        self.samples = array("q")
        self.tokens = array("q")
        self.samples_known = True  # one step of unknown size makes the total unknown
        self.tokens_known = True
        self._logged = 0  # steps already covered by a log line

    def add(self, step_s: float, phases: list[float], samples: int | None, tokens: int | None) -> None:
        self.rows.append(step_s)
        self.rows.extend(phases)
        if samples is None:
            self.samples_known = False
        else:
            self.samples.append(samples)
        if tokens is None:
            self.tokens_known = False
        else:
            self.tokens.append(tokens)

    @property
    def steps(self) -> int:
        return len(self.rows) // self._WIDTH

    @property
    def steps_since_log(self) -> int:
        return self.steps - self._logged

    def column(self, index: int, start: int = 0, end: int | None = None) -> array:
        """Column `index` (0: step time, then PHASES) for steps [start, end)."""
        end = self.steps if end is None else end
        return self.rows[start * self._WIDTH + index : end * self._WIDTH : self._WIDTH]

    def window(self, start: int = 0, end: int | None = None) -> Window:
        """Totals over steps [start, end)."""
        end = self.steps if end is None else end
        return Window(
            steps=end - start,
            total_ms=sum(self.column(0, start, end)) * 1e3,
            phase_ms=[sum(self.column(1 + i, start, end)) * 1e3 for i in range(len(PHASES))],
            samples=sum(self.samples[start:end]) if self.samples_known else None,
            tokens=sum(self.tokens[start:end]) if self.tokens_known else None,
        )

    def take_recent(self) -> Window:
        """The steps since the last call, as one window."""
        start, self._logged = self._logged, self.steps
        return self.window(start)

    def distribution(self) -> dict[str, float] | None:
        if not self.rows:
            return None
        ordered = sorted(s * 1e3 for s in self.column(0))
        return {
            "mean": statistics.fmean(ordered),
            "median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "min": ordered[0],
            "max": ordered[-1],
        }


def phases_ms(window: Window) -> dict[str, float | None]:
    """Mean milliseconds per step in each phase."""
    return {p: (ms / window.steps if window.steps else None) for p, ms in zip(PHASES, window.phase_ms, strict=True)}


def per_second(count: int | None, window: Window) -> float | None:
    return count / (window.total_ms / 1e3) if count and window.total_ms > 0 else None


def log_line(last_index: int, window: Window, mfu: float | None) -> str:
    """`trainprof step 99: 52.1 ms/step (data 30.2, forward ...), 1228 samples/s, MFU 31.0%`."""
    mean = window.total_ms / window.steps
    phases = ", ".join(f"{p} {ms / window.steps:.1f}" for p, ms in zip(PHASES, window.phase_ms, strict=True))
    line = f"trainprof step {last_index}: {mean:.1f} ms/step ({phases})"
    rate = per_second(window.samples, window)
    if rate is not None:
        line += f", {rate:.0f} samples/s"
    if mfu is not None:
        line += f", MFU {mfu:.1%}"
    return line
