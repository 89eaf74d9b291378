"""The whole pipeline behind ``trainprof.analyze``: read, analyse, diagnose."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from trainprof.analysis import analyze as overview
from trainprof.analysis.results import Analysis
from trainprof.diagnose.engine import diagnose
from trainprof.structs import replace
from trainprof.trace.load import Progress
from trainprof.trace.model import Trace

if TYPE_CHECKING:
    from concurrent.futures import Executor


def analyze(
    source: str | os.PathLike[str] | Iterable[Trace], progress: Progress | None = None,
    workers: int | None = None, executor: Executor | None = None,
    max_memory: int | str | None = None,
) -> Analysis:
    """Analyse a trace file, a folder of ranks, a cluster summary, or loaded traces, and
    diagnose the result. ``workers``: processes for a folder's traces (None: by cores and
    memory; 1: this process only). ``executor``: any ``concurrent.futures.Executor`` to run
    one task per trace file on instead (a Dask client's ``get_executor()``; docs/cluster.md).
    ``max_memory``: bytes (or ``"4G"``, ``"512M"``) one trace's analysis may take; a trace
    that would not fit read whole is analysed window by window from disk (default: half the
    available memory; docs/performance.md). A bad size raises ``ValueError``.

    Raises ``trainprof.TraceError`` when the input cannot be read as Kineto traces.
    """
    if max_memory is not None:
        from trainprof.analysis.options import table_options, using_table_options
        from trainprof.analysis.streaming.memory_budget import parse_memory

        budget = parse_memory(max_memory) if isinstance(max_memory, str) else int(max_memory)
        with using_table_options(replace(table_options(), max_memory=budget)):
            return analyze(source, progress, workers, executor)
    analysis = overview.analyze_ranks(source, progress=progress, workers=workers,
                                executor=executor)
    analysis.findings = diagnose(analysis)
    return analysis
