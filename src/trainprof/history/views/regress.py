"""Trends per run name, and regressions flagged against a rolling baseline, noise allowed for.

A series is the runs of one name and kind, oldest first (``history.views.series``). Each run is judged
against the median of the ``BASELINE_RUNS`` runs before it at the same level. It is flagged
when all three hold:

- it moved by more than ``threshold_pct`` (``THRESHOLD_PCT``, 5% by default);
- and by more than the run-to-run noise allows (``stats.noise_band_pct``: the spread of
  successive runs, a false alarm in ``stats.FALSE_ALARM`` of steady runs); until a series has enough runs
  to know that spread, its runs build the baseline and nothing is flagged;
- and the step-to-step noise leaves little doubt: in the bootstrap of ``trainprof.stats``
  (that of ``trainprof compare``'s gate), the run's steps against the baseline's pooled steps
  pass the threshold in at least ``CONFIDENCE`` of the resamples (rows without per-step times
  are judged on their medians).

A flagged run, slower (regression) or faster (improvement), starts a new level: later runs are
judged against it, so a step change is flagged once. When the run just before it already sat
nearer the new level than the old, the flag moves there (the change began a run earlier; the
verdict says which run confirmed it). A change of setup (world size, devices, samples per step)
starts a new level too, unflagged, and the noise is learnt again.
"""

from __future__ import annotations

import statistics

import msgspec
from msgspec import field

from trainprof.deprecated import old_names
from trainprof.history.store.rows import RunRecord, thin
from trainprof.history.views.series import Point, points_of
from trainprof.stats import SlowdownOdds, noise_band_pct, slowdown_odds
from trainprof.structs import Derived, Record

BASELINE_RUNS = 5
THRESHOLD_PCT = 5.0
#: Runs whose successive differences give the run-to-run noise (at most, the latest).
NOISE_RUNS = 20
CONFIDENCE = 0.9
#: Pooled baseline steps given to the bootstrap (thinned evenly per run above this).
BOOTSTRAP_MAX_STEPS = 4096


class RegressionVerdict(Record):
    """How a run compares with its baseline. ``status``: regression, improvement, steady,
    baseline (the noise is not known yet), first, new setup, or unknown (no step time)."""

    json_derived = (Derived("probability", "threshold_pct"), Derived("confidence", "probability"))
    json_internal = frozenset({"odds"})

    status: str
    change_pct: float | None = None
    baseline_ms: float | None = None
    baseline: list[str] = field(default_factory=list, name="baseline_runs")
    allowance_pct: float | None = None
    threshold_pct: float = THRESHOLD_PCT
    odds: SlowdownOdds | None = None
    #: Set when the change was flagged at an earlier run than the one that made it sure.
    confirmed_by: str | None = None

    @property
    def flagged(self) -> bool:
        return self.status in ("regression", "improvement")

    @property
    def probability(self) -> float | None:
        """The odds' probability of a change past the threshold (None without odds)."""
        return None if self.odds is None else self.odds.probability

    @property
    def confidence(self) -> str | None:
        return None if self.odds is None else self.odds.words


class Series(msgspec.Struct):
    name: str
    kind: str
    points: list[Point]
    verdicts: list[RegressionVerdict]

    def flagged(self) -> list[tuple[Point, RegressionVerdict]]:
        return [(p, v) for p, v in zip(self.points, self.verdicts, strict=True) if v.flagged]


def series_of(records: list[RunRecord], *, baseline_runs: int = BASELINE_RUNS,
              threshold_pct: float = THRESHOLD_PCT) -> list[Series]:
    """The series in ``records``, each judged; ordered by name, then kind."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for r in sorted(records, key=lambda r: (r.recorded_at, r.id or 0)):
        groups.setdefault((r.name, r.kind), []).append(r)
    out = []
    for (name, kind), rows in sorted(groups.items()):
        points = points_of(rows)
        out.append(Series(name, kind, points, judge(points, baseline_runs, threshold_pct)))
    return out


def judge(points: list[Point], baseline_runs: int = BASELINE_RUNS,
          threshold_pct: float = THRESHOLD_PCT) -> list[RegressionVerdict]:
    """A verdict per point (see the module's docstring)."""
    verdicts = [RegressionVerdict("unknown") for _ in points]
    level = [0] * len(points)  # the index of the run that began each point's level
    start = setup = i = 0  # where the current level and the current setup began
    while i < len(points):
        p = points[i]
        level[i] = start
        before = next((q for q in reversed(points[:i]) if q.median_ms is not None), None)
        if p.median_ms is None:
            pass
        elif before is not None and p.setup != before.setup:
            start = setup = level[i] = i
            verdicts[i] = RegressionVerdict("new setup")
        elif not any(q.median_ms is not None for q in points[start:i]):
            verdicts[i] = RegressionVerdict("first")
        else:
            base = [q for q in points[start:i] if q.median_ms is not None][-baseline_runs:]
            verdicts[i] = _against(p, base, _levels(points, level, setup, i), threshold_pct)
            if verdicts[i].flagged:
                onset = _onset(points, start, i, verdicts[i], threshold_pct)
                if onset < i:
                    seen = verdicts[i]
                    verdicts[onset] = RegressionVerdict(seen.status, _change(points[onset], seen),
                                              seen.baseline_ms, seen.baseline, seen.allowance_pct,
                                              odds=seen.odds, threshold_pct=threshold_pct,
                                              confirmed_by=p.label)
                start, i = onset, onset  # judge the runs after it against the new level
                level[i] = start
        i += 1
    return verdicts


def _levels(points: list[Point], level: list[int], setup: int, i: int) -> list[list[float]]:
    """The medians of the latest NOISE_RUNS runs before ``i`` since its setup began, split where
    each level began."""
    out: dict[int, list[float]] = {}
    for k in range(max(setup, i - NOISE_RUNS), i):
        median = points[k].median_ms
        if median is not None:
            out.setdefault(level[k], []).append(median)
    return list(out.values())


def _against(p: Point, base: list[Point], levels: list[list[float]], threshold_pct: float
             ) -> RegressionVerdict:
    current = _median(p)
    reference = statistics.median(_median(q) for q in base)
    change = (current / reference - 1.0) * 100.0
    verdict = RegressionVerdict("steady", change, reference, [q.label for q in base],
                      threshold_pct=threshold_pct)
    band = noise_band_pct(levels, len(base))
    if band is None:
        verdict.status = "baseline"
        return verdict
    allowance = verdict.allowance_pct = max(threshold_pct, band)
    slower = change > allowance
    faster = (reference / current - 1.0) * 100.0 > allowance
    if not (slower or faster):
        return verdict
    pooled, _ = thin([(k, q.step_times_ms) for k, q in enumerate(base) if q.step_times_ms],
                     BOOTSTRAP_MAX_STEPS)
    if pooled and p.step_times_ms:  # how sure, given the steps' noise, that it passes the threshold
        verdict.odds = (slowdown_odds(pooled, p.step_times_ms, threshold_pct) if slower
                        else slowdown_odds(p.step_times_ms, pooled, threshold_pct))
    if verdict.odds is None or verdict.odds.probability >= CONFIDENCE:
        verdict.status = "regression" if slower else "improvement"
    return verdict


def _onset(points: list[Point], start: int, i: int, seen: RegressionVerdict, threshold_pct: float) -> int:
    """The first of the runs just before ``i`` (after its level's first) that already sit past
    the threshold, on the same side, nearer the new level than the baseline; else ``i``."""
    onset = i
    new, old = _median(points[i]), _baseline(seen)
    for k in range(i - 1, start, -1):
        m = points[k].median_ms
        if m is None or abs(m - new) >= abs(m - old) or (m > old) != (new > old):
            break
        if abs(_change(points[k], seen)) <= threshold_pct:
            break
        onset = k
    return onset


def _change(p: Point, seen: RegressionVerdict) -> float:
    return (_median(p) / _baseline(seen) - 1.0) * 100.0


def _median(p: Point) -> float:
    """The median step time of a run being judged (only runs that have one are judged)."""
    if p.median_ms is None:
        raise ValueError(f"Run {p.label} has no step time to judge.")
    return p.median_ms


def _baseline(seen: RegressionVerdict) -> float:
    """The baseline median of a verdict that compared the run with one (a flagged verdict)."""
    if seen.baseline_ms is None:
        raise ValueError(f"The verdict {seen.status!r} has no baseline to compare with.")
    return seen.baseline_ms


__getattr__ = old_names(__name__, {"Verdict": "RegressionVerdict"})
