"""One worker process of a parallel analysis: ``python -m trainprof.analysis.parallel.worker``.

It reads tasks from stdin and writes results to stdout, each a length-prefixed pickle. A plain
subprocess rather than ``multiprocessing``: no user code runs in it (multiprocessing's spawn
would import the caller's ``__main__`` module again, and re-run an unguarded script).
"""

from __future__ import annotations

import os
import pickle
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainprof.analysis.options import AnalyzeOptions
from trainprof.errors import TraceError
from trainprof.interrupts import ignore_interrupts
from trainprof.pipes import read_frame, write_frame
from trainprof.structs import replace

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis


def analyze_file(path: Path, options: AnalyzeOptions, single: bool,
                 decode_workers: int | None = None) -> tuple[str, Any]:
    """("ok", RankAnalysis) (a list of them for an export of several ranks), ("skipped", reason) for a file that is not a trace among several,
    or ("error", exception). ``decode_workers``: processes decoding the file and computing its
    sections (None: as trace/parallel_decode.py and analysis/parallel/section_workers.py
    choose; 1 where the files already share the cores)."""
    from trainprof.analysis.overview.rank import analyze_trace
    from trainprof.analysis.streaming.memory_budget import default_budget, needs_streaming
    from trainprof.trace.load import is_not_a_trace, load_file
    from trainprof.trace.nsys.detect import is_nsys_file

    try:
        budget = options.max_memory or default_budget()
        if is_nsys_file(path):  # one export, a rank per process
            ranks = _export_ranks(path, options, budget, decode_workers)
            return "ok", ranks if single else [compact(r) for r in ranks]
        if needs_streaming(path, budget):  # too large to read whole: window by window
            from trainprof.analysis.streaming.streamed import analyze_streamed

            result = analyze_streamed(path, budget, options=options)
        else:
            result = analyze_trace(load_file(path, workers=decode_workers),
                                   workers=decode_workers, options=options)
        return "ok", result if single else compact(result)
    except TraceError as exc:
        if not single and is_not_a_trace(exc):
            return "skipped", str(exc)
        return "error", exc
    except Exception as exc:  # re-raised in the parent, as a serial run would raise it
        return "error", exc


def _export_ranks(path: Path, options: AnalyzeOptions, budget: int,
                  decode_workers: int | None) -> list[RankAnalysis]:
    """Each rank of an Nsight Systems export: read whole, or streamed from a spill when the
    whole read would not fit ``budget`` (analysis/streaming/streamed.py)."""
    from trainprof.analysis.overview.rank import analyze_trace
    from trainprof.analysis.streaming.memory_budget import needs_streaming
    from trainprof.trace.load import load_traces
    from trainprof.trace.nsys.detect import sqlite_of

    marker = re.compile(options.step_marker) if options.step_marker else None
    export = sqlite_of(path)
    if needs_streaming(export, budget):
        from trainprof.analysis.streaming.streamed import analyze_export_streamed

        return analyze_export_streamed(export, budget, marker, options=options)
    return [analyze_trace(t, workers=decode_workers, options=options)
            for t in load_traces(export, step_marker=marker)]


def compact(result: RankAnalysis) -> RankAnalysis:
    """A rank of a folder, as its job holds it: the critical path keeps the pieces its JSON
    and reports show (``CriticalPath.compact``); one trace analysed alone keeps them all."""
    path = result.sections.critical_path
    if path is not None:
        result.sections = replace(result.sections, critical_path=path.compact())
    return result


def main() -> None:
    # Ctrl-C reaches the whole process group: the parent handles it and stops the workers.
    # Started with SIGINT held back (analysis/parallel/pool.py), so none is raised before this.
    ignore_interrupts()
    tasks = sys.stdin.buffer
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints must not corrupt frames
    while True:
        try:
            index, path, options, single = read_frame(tasks)
        except EOFError:
            return
        status, payload = analyze_file(path, options, single)
        try:
            write_frame(results, (index, status, payload))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            write_frame(results, (index, "error", RuntimeError(f"{type(payload).__name__}: "
                                                               f"{payload} ({exc})")))


if __name__ == "__main__":
    main()
