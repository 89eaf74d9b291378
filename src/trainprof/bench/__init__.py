"""Measured, not guessed: which way to train a model is fastest here (docs/bench.md).

    import trainprof.bench as bench

    result = bench.compare(["fp32", "bf16", "compile"], make_model, make_batch, loss_fn=loss)
    print(result.row("bf16").relative_to_baseline)
    report = bench.checklist(make_model, loader=loader, loss_fn=loss)
    print(report.to_dict()["phases_pct"])

Everything here needs torch, which is imported only when a name below is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainprof.lazy import lazy_names

__all__ = [
    "BenchResult",
    "Checklist",
    "DEFAULT_SET",
    "Strategy",
    "StrategyResult",
    "Workload",
    "checklist",
    "compare",
    "demo_workload",
    "load_workload",
    "resolve",
]

_LAZY = {
    "BenchResult": "trainprof.bench.results",
    "StrategyResult": "trainprof.bench.results",
    "Checklist": "trainprof.bench.health",
    "DEFAULT_SET": "trainprof.bench.strategies",
    "Strategy": "trainprof.bench.strategies",
    "resolve": "trainprof.bench.strategies",
    "Workload": "trainprof.bench.workload",
    "demo_workload": "trainprof.bench.workload",
    "load_workload": "trainprof.bench.workload",
    "checklist": "trainprof.bench.phase_timing",
    "compare": "trainprof.bench.benchmark",
}

if TYPE_CHECKING:  # pragma: no cover
    from trainprof.bench.benchmark import compare
    from trainprof.bench.health import Checklist
    from trainprof.bench.phase_timing import checklist
    from trainprof.bench.results import BenchResult, StrategyResult
    from trainprof.bench.strategies import DEFAULT_SET, Strategy, resolve
    from trainprof.bench.workload import Workload, demo_workload, load_workload


__getattr__ = lazy_names(__name__, _LAZY)
