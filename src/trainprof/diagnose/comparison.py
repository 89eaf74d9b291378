"""The comparison of two runs (``trainprof compare``, docs/reports.md): both runs' steps, what
changed (``analysis/deltas.py``), the regression gate and the verdict. ``diagnose/compare.py``
computes it; the renderers read it without the code that loads traces."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from msgspec import field

from trainprof.analysis.deltas import TraceDiff
from trainprof.deprecated import old_names
from trainprof.display import NotebookDisplay
from trainprof.stats import SlowdownOdds, likelihood
from trainprof.structs import Derived, Record, record_dict, replace

SCHEMA = "trainprof.compare/1"
#: Changed ops and kernels listed (the JSON keeps ``analysis.diff.TOP_CHANGES``).
TOP_CHANGED = 10


class Run(Record):
    """One side: its label, every step's time (all ranks) and its step number, ranks, and the
    batch size if known. The JSON writes the step times last, as ``per_step_ms``."""

    json_derived = (Derived("steps", "label"),
                    Derived("median_step_ms", "ranks", attr="median_ms"),
                    Derived("mean_step_ms", "median_step_ms", attr="mean_ms"),
                    Derived("steps_per_s", "mean_step_ms"),
                    Derived("samples_per_s", "batch_size"),
                    Derived("per_step_ms", "samples_per_s", attr="step_ms"))
    json_internal = frozenset({"step_ms", "step_numbers"})

    label: str
    step_ms: list[float]
    ranks: int
    batch_size: int | None = None
    step_numbers: list[object] | None = None

    @property
    def steps(self) -> int:
        return len(self.step_ms)

    @property
    def median_ms(self) -> float | None:
        return float(np.median(self.step_ms)) if self.step_ms else None

    @property
    def mean_ms(self) -> float | None:
        return float(np.mean(self.step_ms)) if self.step_ms else None

    @property
    def steps_per_s(self) -> float | None:
        m = self.median_ms
        return 1000.0 / m if m else None

    @property
    def samples_per_s(self) -> float | None:
        """Batch size x ranks / median step time, when the batch size is known."""
        rate = self.steps_per_s
        return None if rate is None or self.batch_size is None else rate * self.batch_size * self.ranks


class Gate(Record):
    """``--fail-if-slower``: failed when NEW's median step is slower by more than the limit.
    Its JSON: the limit, the verdict and its message, then the odds' figures beside them."""

    json_derived = (Derived("failed", "limit_pct"), Derived("message", "failed", attr="text"))
    json_internal = frozenset({"base_ms", "new_ms", "ranks"})
    json_spread = frozenset({"odds"})

    limit_pct: float
    odds: SlowdownOdds | None
    base_ms: float | None
    new_ms: float | None
    ranks: int = 1  # the most ranks of either run

    @property
    def failed(self) -> bool:
        return self.odds is not None and self.odds.change_pct > self.limit_pct

    def message(self) -> str:
        o = self.odds
        if o is None:
            return "trainprof compare: no steps to compare; the gate cannot judge (passes)."
        how = "slower" if o.change_pct >= 0 else "faster"
        verdict = "FAIL" if self.failed else "OK"
        side = "over" if self.failed else "within"
        text = (f"{verdict}: NEW's median step is {abs(o.change_pct):.1f}% {how} than BASE's "
                f"({self.base_ms:.1f} -> {self.new_ms:.1f} ms), {side} the "
                f"{self.limit_pct:g}% limit. ")
        if not o.judged:
            return text + (f"How sure that is cannot be told from {o.base_steps} + "
                           f"{o.new_steps} steps: one step has no step-to-step noise to measure.")
        text += (f"That NEW is really more than {self.limit_pct:g}% "
                 f"slower is {o.words} ({o.probability * 100:.1f}% of bootstrap resamples of "
                 f"{o.base_steps} + {o.new_steps} steps{self.per_rank}; 90% interval "
                 f"{o.low_pct:+.1f}% to {o.high_pct:+.1f}%).")
        if o.rough:
            text += " Few steps were recorded, so this estimate of the noise is rough."
        return text

    @property
    def per_rank(self) -> str:
        """How several ranks were resampled, for the message."""
        return ", the ranks of a step together" if self.ranks > 1 else ""

    @property
    def text(self) -> str:
        """``message()``."""
        return self.message()


class SpeedVerdict(Record):
    """Without a gate too: which run is faster by median step, and how sure that is given the
    step-to-step noise (the bootstrap of trainprof/stats.py with a limit of 0%). Its JSON
    writes only figures derived from the odds."""

    json_derived = (Derived("faster", "", attr="reported_faster"),
                    Derived("probability", "faster"), Derived("confidence", "probability"),
                    Derived("change_pct", "confidence"),
                    Derived("interval_90_pct", "change_pct"),
                    Derived("message", "interval_90_pct", attr="text"))
    json_internal = frozenset({"odds", "base_ms", "new_ms"})

    odds: SlowdownOdds | None
    base_ms: float | None
    new_ms: float | None

    @property
    def faster(self) -> bool:
        return self.odds is not None and self.odds.change_pct < 0

    @property
    def probability(self) -> float | None:
        """That NEW really is as it looks (faster, or slower) rather than noise."""
        o = self.odds
        if o is None or not o.judged:
            return None
        return 1.0 - o.probability if self.faster else o.probability

    def message(self) -> str:
        o = self.odds
        if o is None:
            return "No verdict: a run has no steps to compare."
        how = "faster" if self.faster else "slower"
        text = (f"NEW's median step is {abs(o.change_pct):.1f}% {how} than BASE's "
                f"({self.base_ms:.1f} -> {self.new_ms:.1f} ms). ")
        p = self.probability
        if p is None:
            return text + (f"How sure that is cannot be told from {o.base_steps} + "
                           f"{o.new_steps} steps: one step has no step-to-step noise to measure.")
        text += (f"That NEW is really {how} is {likelihood(p)} ({p * 100:.1f}% of bootstrap "
                 f"resamples of {o.base_steps} + {o.new_steps} steps; 90% interval "
                 f"{o.low_pct:+.1f}% to {o.high_pct:+.1f}%).")
        if o.rough:
            text += " Few steps were recorded, so this estimate of the noise is rough."
        return text

    @property
    def reported_faster(self) -> bool | None:
        """``faster``, None without odds."""
        return self.faster if self.odds else None

    @property
    def confidence(self) -> str:
        p = self.probability
        return likelihood(p) if p is not None else "unknown"

    @property
    def change_pct(self) -> float | None:
        return self.odds.change_pct if self.odds else None

    @property
    def interval_90_pct(self) -> list[float] | None:
        return self.odds.interval_90_pct if self.odds else None

    @property
    def text(self) -> str:
        """``message()``."""
        return self.message()


class Comparison(NotebookDisplay, Record):
    """Two runs side by side. Its JSON: the schema, both runs, what changed (the diff's keys,
    ``with_top`` changes listed), the gate and the verdict, and the diff's notes and its own
    (at the diff's ``notes`` place)."""

    json_derived = (Derived("schema", "", attr="schema"),
                    Derived("notes", "verdict", attr="all_notes"))
    json_internal = frozenset({"notes"})
    json_spread = frozenset({"diff"})

    base: Run
    new: Run
    diff: TraceDiff
    gate: Gate | None = None
    notes: list[str] = field(default_factory=list)
    verdict: SpeedVerdict | None = None

    @property
    def schema(self) -> str:
        return SCHEMA

    @property
    def all_notes(self) -> list[str]:
        return [*self.diff.notes, *self.notes]

    def with_top(self, top: int = TOP_CHANGED) -> Comparison:
        """The comparison whose JSON lists the ``top`` largest changes of ops and kernels."""
        return replace(self, diff=replace(self.diff, top=top))

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """The JSON form. ``top`` (deprecated): ``with_top(top).to_dict()``."""
        if top is None:
            return record_dict(self)
        warnings.warn("Comparison.to_dict(top) is deprecated: use with_top(top).to_dict()",
                      DeprecationWarning, stacklevel=2)
        return record_dict(self.with_top(top))



__getattr__ = old_names(__name__, {"Verdict": "SpeedVerdict"})
