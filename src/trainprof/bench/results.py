"""What a strategy benchmark measured, as plain data (no torch): one row per strategy.

The JSON form (`schema: trainprof.bench/1`) is a contract, described in docs/bench.md.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

import numpy as np
from msgspec import field

from trainprof.analysis.tabular import summary
from trainprof.structs import Derived, Record

SCHEMA = "trainprof.bench/1"
#: The baseline run again at the end differing by more than this (percent) means the machine's
#: speed changed during the run: repeats on one quiet machine agree within a few percent.
DRIFT_WARN_PCT = 10.0
Status = Literal["ok", "skipped", "failed"]


class StrategyResult(Record):
    """One strategy: its throughput over each repeat, every timed step, phases, peak memory.

    A step is one optimizer step (with gradient accumulation, several batches). `status` is
    "ok", "skipped" (does not apply here; `reason` says why) or "failed" (`reason`: the error).
    """

    json_derived = (Derived("skipped", "status"), Derived("failed", "skipped"),
                    Derived("samples_per_s", "reason"),
                    Derived("samples_per_s_std", "samples_per_s"),
                    Derived("samples_per_s_min", "samples_per_s_std"),
                    Derived("samples_per_s_max", "samples_per_s_min"),
                    Derived("steps_timed", "samples_per_step"),
                    Derived("step_ms", "steps_timed", attr="step_ms_summary"))
    json_internal = frozenset({"step_times_ms"})

    name: str
    description: str
    status: Status = "ok"
    reason: str | None = None
    repeat_samples_per_s: list[float] = field(default_factory=list)
    tokens_per_s: float | None = None
    relative_to_baseline: float | None = None
    samples_per_step: int | None = None
    step_times_ms: list[float] = field(default_factory=list)
    phases_ms: dict[str, float | None] | None = None
    peak_memory_bytes: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def samples_per_s(self) -> float | None:
        """The median repeat's: one repeat disturbed by other work on the machine moves it
        less than it would move the mean."""
        return statistics.median(self.repeat_samples_per_s) if self.repeat_samples_per_s else None

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def samples_per_s_min(self) -> float | None:
        return min(self.repeat_samples_per_s) if self.repeat_samples_per_s else None

    @property
    def samples_per_s_max(self) -> float | None:
        return max(self.repeat_samples_per_s) if self.repeat_samples_per_s else None

    @property
    def steps_timed(self) -> int:
        return len(self.step_times_ms)

    @property
    def samples_per_s_std(self) -> float | None:
        """Standard deviation over the repeats (0 with one repeat)."""
        rates = self.repeat_samples_per_s
        if not rates:
            return None
        return statistics.stdev(rates) if len(rates) > 1 else 0.0

    def step_ms(self) -> dict[str, float | None] | None:
        """Median, p90, mean, min and max of every timed step, in ms."""
        if not self.step_times_ms:
            return None
        times = np.asarray(self.step_times_ms, dtype=np.float64)
        stats = summary(times)
        return {"median": stats.median, "p90": stats.p90, "mean": stats.mean,
                "min": float(times.min()), "max": stats.max}

    @property
    def step_ms_summary(self) -> dict[str, float | None] | None:
        """``step_ms()``."""
        return self.step_ms()


class BenchResult(Record):
    """Every strategy's row, the baseline they are compared with, and how they were run. Its
    JSON opens with the schema, the device, the baseline and the fastest strategy, and lists
    the rows last."""

    json_derived = (Derived("schema", "", attr="schema"), Derived("device", "schema"),
                    Derived("baseline", "device"),
                    Derived("fastest", "baseline", attr="fastest_name"),
                    Derived("baseline_again", "fastest"),
                    Derived("strategies", "environment"))
    json_internal = frozenset({"strategies", "baseline", "device",
                               "baseline_again_samples_per_s"})

    strategies: list[StrategyResult]
    baseline: str | None
    device: str
    settings: dict[str, Any]
    environment: dict[str, Any]
    baseline_again_samples_per_s: float | None = None

    @property
    def drift_pct(self) -> float | None:
        """How much faster (+) or slower (-) the baseline ran again at the end, in percent:
        the machine's change of speed during the run, which every row in between may share."""
        again = self.baseline_again_samples_per_s
        first = self.row(self.baseline).samples_per_s if self.baseline else None
        return 100.0 * (again / first - 1.0) if again and first else None

    @property
    def drifted(self) -> bool:
        drift = self.drift_pct
        return drift is not None and abs(drift) > DRIFT_WARN_PCT

    def row(self, name: str) -> StrategyResult:
        """The row of the strategy called `name` (KeyError when there is none)."""
        for result in self.strategies:
            if result.name == name:
                return result
        raise KeyError(name)

    def fastest(self) -> StrategyResult | None:
        """The strategy with the most samples/s, of those that ran."""
        ran = [r for r in self.strategies if r.ok and r.samples_per_s]
        return max(ran, key=lambda r: r.samples_per_s or 0.0) if ran else None

    @property
    def schema(self) -> str:
        return SCHEMA

    @property
    def fastest_name(self) -> str | None:
        fastest = self.fastest()
        return fastest.name if fastest else None

    @property
    def baseline_again(self) -> dict[str, Any]:
        """The baseline run again at the end: its samples/s and the drift from its first run."""
        return {"samples_per_s": self.baseline_again_samples_per_s,
                "drift_pct": self.drift_pct, "drifted": self.drifted}


def set_relative_speeds(results: list[StrategyResult], baseline: str | None) -> None:
    """Each row's samples/s over the baseline's (None where either did not run)."""
    base = next((r for r in results if r.name == baseline), None)
    base_rate = base.samples_per_s if base is not None and base.ok else None
    for result in results:
        rate = result.samples_per_s
        result.relative_to_baseline = rate / base_rate if rate and base_rate else None
