"""``analyze_ranks``: a trace file, a folder of ranks, loaded traces or a cluster's summaries, on
local processes or any executor, into one ``Analysis``. The data model is analysis/results.py
and the analysis of one trace analysis/overview/rank.py (both re-exported here)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from trainprof.analysis.job.one_job import why_not_one_job
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.overview.rank import RECORDED_VERSIONS, analyze_trace, environment  # noqa: F401
from trainprof.analysis.parallel.inputs import add_summarised, analyze_path
from trainprof.analysis.results import SCHEMA, Analysis, RankAnalysis  # noqa: F401
from trainprof.analysis.sections.registry import run_job_sections
from trainprof.errors import TraceError
from trainprof.trace import discover
from trainprof.trace.load import Progress
from trainprof.trace.model import Trace

if TYPE_CHECKING:
    from concurrent.futures import Executor


def analyze_ranks(
    source: str | os.PathLike[str] | Iterable[Trace], progress: Progress | None = None,
    workers: int | None = None, executor: Executor | None = None,
    options: AnalyzeOptions | None = None,
) -> Analysis:
    """The figures of every rank and the job's sections, without findings (``trainprof.analyze``,
    pipeline.py, adds them: the one public ``analyze``). From a trace file, a folder of ranks
    (traces and cluster summaries), or already loaded traces. A folder's traces are analysed in ``workers`` processes (None: as many as
    the cores and the memory allow; 1: in this process; analysis/parallel/pool.py), or as tasks on
    ``executor`` when one is given (analysis/parallel/on_executor.py). ``options``: the
    analysis's (None: the defaults), passed to every section and worker and kept on the result.

    Raises ``trainprof.TraceError`` when the input cannot be read as Kineto traces.
    """
    summarised, options = None, options or AnalyzeOptions()
    if isinstance(source, str | os.PathLike):
        results, summarised = analyze_path(Path(source), progress, workers, executor, options)
        label = str(source)
    else:
        results = [analyze_trace(t, options=options) for t in source]
        label = ""
    notes: list[str] = []
    if results:
        placements, notes = discover.place(
            [r.path for r in results], [r.rank_in_trace for r in results]
        )
        for r, p in zip(results, placements, strict=True):
            r.rank, r.window = p.rank, p.window
    if summarised is not None:
        notes += add_summarised(results, summarised)
    if not results:
        skipped = " (the files skipped above are not traces)" if Path(label).is_dir() else ""
        raise TraceError(f"{label or 'The input'} holds no Kineto traces{skipped}.")
    reason = why_not_one_job(results)
    if reason is not None:
        raise TraceError(reason)
    results.sort(key=lambda r: (r.rank, r.window))
    return Analysis(ranks=results, notes=notes, source=label, job=run_job_sections(results),
                    options=options)
