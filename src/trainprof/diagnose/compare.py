"""Two analysed runs side by side, judged (``trainprof compare``): step time, throughput,
breakdown, phases and the ops that changed most, which run is faster and how sure that is, and
a regression gate for CI; ``report.compare`` draws it.

``commands/compare.py`` loads each side (a trace, a folder, a saved result, a history id) and
hands the two ``Analysis`` here. The deltas come from ``analysis.diff``; the gate compares
median step times and says how sure the slowdown is (``trainprof.stats``). See docs/reports.md.
"""

from __future__ import annotations

from trainprof.analysis.diff import diff
from trainprof.analysis.results import Analysis
from trainprof.deprecated import old_names
from trainprof.diagnose.comparison import TOP_CHANGED, Comparison, Gate, Run, SpeedVerdict
from trainprof.stats import slowdown_odds


def _run(a: Analysis, label: str, batch_size: int | None) -> Run:
    steps = [float(s["ms"]) for r in a.ranks for s in r.steps.per_step]
    numbers: list[object] = [s.get("step", (r.rank, r.window, i)) for r in a.ranks
               for i, s in enumerate(r.steps.per_step)]
    return Run(label, steps, len({r.rank for r in a.ranks}), batch_size, numbers)


def compare_analyses(a: Analysis, b: Analysis, labels: tuple[str, str], *,
                     fail_if_slower: float | None = None,
                     batch_size: tuple[int | None, int | None] = (None, None)) -> Comparison:
    """Compare two analysed runs; ``fail_if_slower`` (percent) adds the regression gate."""
    runs = [_run(x, label, n) for x, label, n in ((a, labels[0], batch_size[0]),
                                                  (b, labels[1], batch_size[1]))]
    result = Comparison(runs[0], runs[1], diff(a, b)).with_top(TOP_CHANGED)
    if fail_if_slower is not None:
        odds = slowdown_odds(runs[0].step_ms, runs[1].step_ms, fail_if_slower,
                             runs[0].step_numbers, runs[1].step_numbers)
        result.gate = Gate(fail_if_slower, odds, runs[0].median_ms, runs[1].median_ms,
                           max(runs[0].ranks, runs[1].ranks))
    result.verdict = SpeedVerdict(slowdown_odds(runs[0].step_ms, runs[1].step_ms, 0.0,
                                           runs[0].step_numbers, runs[1].step_numbers),
                             runs[0].median_ms, runs[1].median_ms)
    if (note := _device_mismatch(a, b)) is not None:
        result.notes.append(note)
    if any(r.step_ms and len(r.step_ms) < 2 for r in runs):
        result.notes.append("A run with a single step has no step-to-step noise to measure.")
    return result


def _device_mismatch(base: Analysis, new: Analysis) -> str | None:
    """A warning when one run was recorded with a GPU and the other on the CPU only."""
    on_gpu = [any(r.gpus for r in x.ranks) for x in (base, new)]
    if on_gpu[0] == on_gpu[1]:
        return None
    where = ["a GPU" if g else "the CPU only" for g in on_gpu]
    return (f"BASE ran on {where[0]} and NEW on {where[1]}: the step times and breakdowns "
            "measure different hardware, so the differences say little about a code change.")


__getattr__ = old_names(__name__, {"Verdict": "trainprof.diagnose.comparison:SpeedVerdict"})
