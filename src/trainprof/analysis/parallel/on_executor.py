"""Analysing many trace files on any ``concurrent.futures.Executor``: one task per file.

Each task loads and analyses one file where it runs (a Dask worker reads it from the shared
filesystem) and sends back only its outcome: a ``RankAnalysis`` of a few KB, or why the file
was skipped or failed. Outcomes are kept in file order, so they equal a local run's. The first
error cancels every task not yet finished; so does Ctrl-C. docs/cluster.md.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from pathlib import Path
from typing import Any

from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.parallel.worker import analyze_file
from trainprof.errors import TrainprofError
from trainprof.trace.load import Progress


def outcomes_on_executor(files: list[Path], executor: Executor, progress: Progress | None,
                         from_folder: bool = False, options: AnalyzeOptions | None = None
                         ) -> list[tuple[str, Any]]:
    """Each file's outcome, as ``analysis/worker.analyze_file`` gives it, in file order
    (``from_folder``: as in ``parallel.analyze_files``); each task gets ``options`` (None:
    the defaults)."""
    options, single = options or AnalyzeOptions(), len(files) == 1 and not from_folder
    futures: dict[Future, int] = {}
    outcomes: list[tuple[str, Any] | None] = [None] * len(files)
    try:
        for i, file in enumerate(files):
            # absolute: a worker elsewhere has another working directory
            futures[executor.submit(analyze_file, file.absolute(), options, single, 1)] = i
        if progress:
            progress(0, len(files), files[0])
        pending, done = set(futures), 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                i = futures[future]
                outcomes[i] = _outcome(future, files[i])
                done += 1
                if outcomes[i][0] == "error":  # type: ignore[index]
                    raise outcomes[i][1]  # type: ignore[index]
                if progress:
                    progress(done, len(files), files[i])
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return [o if o is not None else ("skipped", "not reached") for o in outcomes]


def _outcome(future: Future, file: Path) -> tuple[str, Any]:
    """The task's outcome, its path the one given here; a failure of the executor itself (not
    of the analysis) as an error."""
    try:
        status, payload = future.result()
        if status == "ok":
            payload.path = file
        return status, payload
    except Exception as exc:
        return "error", TrainprofError(f"The executor could not analyse {file}: "
                                       f"{type(exc).__name__}: {exc}".rstrip(": .") + ".")
