"""``trainprof analyze``: analyse a trace, a folder of ranks or a cluster summary, and write the
result as text, JSON, Markdown or HTML (docs/json.md, docs/reports.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainprof.analysis.options import AnalyzeOptions
from trainprof.cli_history import EXIT_NOT_RECORDED
from trainprof.commands.history import record_if_asked
from trainprof.commands.progress import with_progress
from trainprof.errors import TrainprofError
from trainprof.trackers.log_to import log_and_close, open_asked


def main(args: argparse.Namespace) -> int:
    """Analyse ``args.path`` with the options given, write it, record it if asked."""
    hardware = None
    if args.hardware is not None:
        from trainprof.hardware import load_hardware_file

        hardware = load_hardware_file(args.hardware)
    options = AnalyzeOptions(sort_by=args.sort, top=args.top, by_shape=args.by_shape,
                           modules=args.modules, hardware=hardware,
                           all_ranks=args.all_ranks, max_memory=args.max_memory,
                           step_marker=args.step_marker)
    return _analyze_and_report(args, options)


def analyze_with_progress(path: Path, show_progress: bool, workers: int | None = None,
                          executor: Any = None, options: AnalyzeOptions | None = None) -> Any:
    """The ``Analysis`` of ``path`` (the whole pipeline) with ``options`` (None: the
    defaults), with a progress bar if asked; a result saved by ``--format json`` is read back
    instead (analysis/decode.py), to be rendered with ``options``."""
    from trainprof.pipeline import analyze
    from trainprof.report.saved import is_saved_result, saved_analysis

    options = options or AnalyzeOptions()
    if is_saved_result(path):
        analysis = saved_analysis(path)
        analysis.options = options
        return analysis

    return with_progress(lambda progress: analyze(path, progress=progress, workers=workers,
                                                  executor=executor, options=options),
                         show_progress)


def _analyze_and_report(args: argparse.Namespace, options: AnalyzeOptions) -> int:
    quiet = args.format != "text" or args.no_progress
    trackers, analysis = open_asked(args), None
    try:
        analysis = _analyze_on_cluster(args, options, show_progress=not quiet)
        _write_analysis(analysis, args)
    finally:
        log_and_close(trackers, analysis)
    return 0 if record_if_asked(args, analysis) else EXIT_NOT_RECORDED


def _analyze_on_cluster(args: argparse.Namespace, options: AnalyzeOptions,
                        show_progress: bool) -> Any:
    """The analysis of ``args.path`` with ``options``, on the Dask scheduler the arguments
    name, if any."""
    if args.scheduler is None and args.scheduler_file is None:
        return analyze_with_progress(args.path, show_progress, workers=args.jobs,
                                     options=options)
    from trainprof.analysis.parallel.on_dask import dask_executor

    if args.jobs is not None:
        raise TrainprofError("--jobs sets this machine's processes, and with a Dask scheduler "
                             "its workers analyse the traces: give one or the other.")
    with dask_executor(args.scheduler, args.scheduler_file, args.scheduler_timeout) as executor:
        return analyze_with_progress(args.path, show_progress, executor=executor,
                                     options=options)


def _write_analysis(analysis: Any, args: argparse.Namespace) -> None:
    """The analysis in the asked format, to ``-o`` or standard output (report/formats.py)."""
    from trainprof.report.formats import write_result

    write_result("analysis", analysis, args.format, args.output, args.top)
