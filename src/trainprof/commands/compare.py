"""``trainprof compare``: load two runs (traces, folders, saved results or history ids), compare
them (``diagnose.compare``) and write the comparison; exit 1 when the gate fails (docs/reports.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.results import Analysis
from trainprof.commands.progress import with_progress
from trainprof.diagnose.compare import compare_analyses
from trainprof.diagnose.comparison import Comparison
from trainprof.report.formats import write_result
from trainprof.report.saved import (
    is_saved_result,
    load_result,
    refuse_other_results,
)
from trainprof.trace.load import Progress

Input = str | os.PathLike[str] | Analysis


def main(args: argparse.Namespace) -> int:
    """Compare ``args.base`` and ``args.new`` and write the result; 1 when the gate fails."""
    comparison = with_progress(
        lambda progress: compare(args.base, args.new, fail_if_slower=args.fail_if_slower,
                                 batch_size=args.batch_size, progress=progress),
        not (args.no_progress or args.format != "text"),
    )
    write_result("comparison", comparison, args.format, args.output, args.top)
    gate = comparison.gate
    if gate and (args.format != "text" or args.output):
        print(gate.message(), file=sys.stderr)
    return 1 if gate and gate.failed else 0


def compare(base: Input, new: Input, *, fail_if_slower: float | None = None,
            batch_size: tuple[int | None, int | None] = (None, None),
            progress: Progress | None = None) -> Comparison:
    """Compare two runs; ``fail_if_slower`` (percent) adds the regression gate."""
    a, b = load_side(base, progress), load_side(new, progress)
    return compare_analyses(a, b, (_label(base, a), _label(new, b)),
                            fail_if_slower=fail_if_slower, batch_size=batch_size)


def load_side(x: Input, progress: Progress | None = None) -> Analysis:
    """An ``Analysis`` for a trace, a folder, a saved JSON result, a history id, or an
    ``Analysis``."""
    if isinstance(x, Analysis):
        return x
    from trainprof.history.views.compare_input import analysis_from_history, history_id

    if (run_id := history_id(x)) is not None:  # history:12 or @12 (docs/history.md)
        return analysis_from_history(run_id)
    if is_saved_result(x):
        return analysis_from_dict(load_result(x))
    refuse_other_results(x)
    from trainprof.pipeline import analyze

    return analyze(x, progress=progress)


def _label(src: Input, a: Analysis) -> str:
    if isinstance(src, Analysis):
        return a.source or "analysis"
    return Path(src).name or str(src)
