"""What a path gives the analysis: its traces, analysed in parallel, and its cluster summaries,
with each rank counted once (its trace when the folder has it, else its summary)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainprof.analysis.job.cluster_file import Summarised, rank_list, read_cluster_summaries
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.parallel.pool import analyze_files
from trainprof.analysis.results import RankAnalysis
from trainprof.trace import discover
from trainprof.trace.load import Progress

if TYPE_CHECKING:
    from concurrent.futures import Executor


def analyze_path(path: Path, progress: Progress | None = None, workers: int | None = None,
                 executor: Executor | None = None, options: AnalyzeOptions | None = None
                 ) -> tuple[list[RankAnalysis], Summarised | None]:
    """The analysis of every trace under ``path`` (ranks not yet placed), with ``options``
    (None: the defaults), and the summaries."""
    traces, summaries = discover.find_inputs(path)
    results = analyze_files(traces, progress, workers, executor, from_folder=path.is_dir(),
                            options=options)
    return results, read_cluster_summaries(summaries) if summaries else None


def add_summarised(results: list[RankAnalysis], summarised: Summarised) -> list[str]:
    """Add the summarised ranks that have no trace here to ``results``; returns the notes."""
    traced = {r.rank for r in results}
    added = [r for r in summarised.ranks if r.rank not in traced]
    results.extend(added)
    notes = [note for rank, note in sorted(summarised.failed.items()) if rank not in traced]
    notes += summarised.notes
    for path in sorted(set(summarised.files.values())):
        mine = {rank for rank, p in summarised.files.items() if p == path} - traced
        if mine:
            notes.append(f"{rank_list(mine)} read from {path} (no trace of theirs here).")
    return notes
