"""Estimated savings are honest: apply the fix, run the same job again, compare.

The slow-dataset run estimates that the data wait (its share of the step) would go away; the
same job with the cost removed (the dataset's extra work gone, everything else equal) measures
what really goes away. Runs alternate, and each fixed run is compared with the slow run just
before it (the median of the pairs' ratios), so that the machine's state is shared by both.
"""

from __future__ import annotations

import statistics

import pytest

import trainprof

import workloads

#: Both sides of each comparison are timed: the other worker's tests would load one more than
#: the other (tests/helpers/exclusive.py).
pytestmark = [pytest.mark.slow, pytest.mark.alone]

#: Recordings per side; the measured gain must be within this share of the estimate. Runs are
#: compared by their fastest step (the fix's gain is the same every step; a step slowed by the
#: machine is not the code's cost), pair by pair: the slow side's median step ranged over 28-46
#: ms from run to run, and comparing the medians of all runs put the optimizer's measured gain
#: anywhere in 40-58% (twice outside the tolerance in a full suite) against a steady 51%
#: estimate; pair by pair by median step it still measured 30% once on a plain clone; by the
#: fastest step, 5 pairs, 50.9-53.1% in 3 runs.
REPEATS = 5
TOLERANCE = 0.30


def _saving(kind: str, fixed: str, finding: str, tmp_path) -> tuple[float, float]:
    """(median estimated saving %, measured gain %) of ``kind`` fixed as ``fixed``."""
    estimates, before, after = [], [], []
    for i in range(REPEATS):
        slow = trainprof.analyze(workloads.record(kind, tmp_path / f"{kind}{i}"))
        f = next(x for x in slow.findings if x.id == finding)
        estimates.append(f.saving_pct)
        before.append(slow.ranks[0].steps.min_ms)
        fast = trainprof.analyze(workloads.record(fixed, tmp_path / f"{fixed}{i}"))
        after.append(fast.ranks[0].steps.min_ms)
    estimate = statistics.median(estimates)
    # Each fixed run right after its slow one: the pair shares the machine's state.
    measured = (1.0 - statistics.median(a / b for a, b in zip(after, before, strict=True))) * 100.0
    print(f"\n{kind}: estimated {estimate:.1f}%, measured {measured:.1f}% "
          f"(step {statistics.median(before):.1f} -> {statistics.median(after):.1f} ms)")
    return estimate, measured


def test_slow_dataset_saving_matches_the_fix(tmp_path):
    estimate, measured = _saving("slow_data", "healthy", "data_loading", tmp_path)
    assert estimate > 30  # the data wait is most of the step
    assert abs(measured - estimate) <= TOLERANCE * estimate, (estimate, measured)


def test_per_parameter_optimizer_saving_matches_the_fix(tmp_path):
    """The same loop with Adam(fused=True) instead of the per-parameter for-loop."""
    estimate, measured = _saving("per_param_optimizer", "per_param_optimizer_fixed",
                                 "optimizer_overhead", tmp_path)
    assert abs(measured - estimate) <= TOLERANCE * estimate, (estimate, measured)
