"""``trainprof report``: the self-contained HTML report, and what it is drawn from: the JSON
result, plus each step's breakdown.

The result keeps the breakdown as a mean per step; the report's stacked bars want it step by
step, so while the traces stream through the analysis, ``analysis.overview.breakdown.step_breakdown``
is run on each and its figures are added to ``steps.per_step[i].breakdown_ms`` (an addition to
the JSON contract). A saved JSON result is used as it is (the chart then shows step totals).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainprof.analysis.overview.breakdown import step_breakdown
from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.results import SCHEMA
from trainprof.analysis.snapshot.analyze import UnreadSnapshot
from trainprof.commands.progress import with_progress
from trainprof.diagnose.snapshot import snapshot_result
from trainprof.errors import TrainprofError
from trainprof.pipeline import analyze
from trainprof.report.saved import is_saved_result, load_result, refuse_other_results
from trainprof.trace import discover
from trainprof.trace.load import Progress, iter_traces
from trainprof.trace.model import Trace
from trainprof.trace.snapshot import SnapshotError, find_snapshot_files, is_snapshot_file

#: ms per category, per step of one trace file.
StepBreakdown = dict[str, list[float]]


def main(args: argparse.Namespace) -> int:
    """Write the HTML report of ``args.path`` to ``args.output`` and say where it is."""
    from trainprof.report.html.report import write_html

    result = with_progress(lambda progress: report_result(args.path, progress, args.trust),
                           not args.no_progress)
    path = write_html(result, args.output, rows=args.top)
    print(f"Report written to {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser.")
    return 0


def report_result(path: str | os.PathLike[str], progress: Progress | None = None,
                  trust: bool = False) -> dict[str, Any]:
    """The result dict for a trace, a folder of traces, or a saved JSON result; a memory
    snapshot, or snapshots in the folder, add ``memory_snapshots`` (``trust``: read them with
    plain pickle, see trace/snapshot.py)."""
    if is_snapshot_input(path):
        return snapshot_only_result(path, trust, SCHEMA)
    if is_saved_result(path):
        return load_result(path)
    refuse_other_results(path)
    if only_cluster_summaries(path):
        return analyze(path, progress).to_dict()  # docs/distributed.md
    per_file: dict[Path, StepBreakdown] = {}
    analysis = analyze(_with_breakdown(iter_traces(path, progress), per_file))
    analysis.source = str(path)
    result = analysis.to_dict()
    for rank, out in zip(analysis.ranks, result["ranks"], strict=True):
        add_step_breakdown(out, per_file.get(rank.path))
    snapshots = snapshots_for(path, trust)
    if snapshots:
        result["memory_snapshots"] = snapshots
    return result


def only_cluster_summaries(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a cluster_summary.json, or a folder with summaries and no trace."""
    try:
        traces, summaries = discover.find_inputs(Path(path))
    except TrainprofError:
        return False  # the trace path below says what is wrong
    return bool(summaries) and not traces


def _with_breakdown(traces: Iterator[Trace], sink: dict[Path, StepBreakdown]
                    ) -> Iterator[Trace]:
    """The traces, unchanged; each one's per-step breakdown (ms) lands in ``sink``."""
    for trace in traces:
        per_step = step_breakdown(trace, find_steps(trace)).per_step
        sink[trace.path] = {c: [float(v) / 1000.0 for v in us] for c, us in per_step.items()}
        yield trace


def add_step_breakdown(rank: dict[str, Any], breakdown: StepBreakdown | None) -> None:
    """Put each step's breakdown beside its time, when the step counts agree."""
    steps = rank["steps"]["per_step"]
    if not breakdown or any(len(v) != len(steps) for v in breakdown.values()):
        return
    for i, step in enumerate(steps):
        step["breakdown_ms"] = {c: v[i] for c, v in breakdown.items()}


def is_snapshot_input(path: str | os.PathLike[str]) -> bool:
    """Whether the report's input is a snapshot file itself (no traces)."""
    return is_snapshot_file(Path(path))


def snapshots_for(path: str | os.PathLike[str], trust: bool = False) -> list[dict[str, Any]]:
    """The analysed snapshots of a report's input. A snapshot file given itself must read (its
    error is the report's); in a folder, one that cannot be read becomes an error entry."""
    path = Path(path)
    if is_snapshot_file(path):
        return [snapshot_result(path, trust)]
    if not path.is_dir():
        return []
    out: list[dict[str, Any]] = []
    for file in find_snapshot_files(path):
        try:
            out.append(snapshot_result(file, trust))
        except SnapshotError as error:
            out.append(UnreadSnapshot(str(file), str(error)).to_dict())
    return out


def snapshot_only_result(path: str | os.PathLike[str], trust: bool, schema: str) -> dict[str, Any]:
    """A report's result when the input is a snapshot and no traces."""
    return {"schema": schema, "source": str(path), "ranks": [], "findings": [], "notes": [],
            "job": {}, "memory_snapshots": snapshots_for(path, trust)}
