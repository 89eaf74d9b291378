"""``trainprof run``: record an unmodified training script, then print the analysis.

    trainprof run --out traces -- train.py --lr 3e-4
    torchrun --nproc_per_node=2 -m trainprof run --out traces -- train.py

The script runs under the profiler (``capture.script_run``); each rank writes its own files, and
the lowest recorded rank analyses this run's files once the others' files are there, prints the
analysis and the memory breakdown, logs to the trackers asked for, and with ``--record`` every
rank stores its step timer's row in the history (the printing rank with the findings).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainprof.capture.config import DEFAULT_SCHEDULE, ProfileConfig
from trainprof.capture.run_timer import run_timer
from trainprof.capture.safety import RecordingWarning, recording_warnings_on_one_line
from trainprof.capture.script_run import (
    first_recorded_rank,
    record_script,
    run_traces,
    script_target,
)
from trainprof.cli_run import FLAGS, parse_run_args
from trainprof.errors import TrainprofError
from trainprof.trackers.log_to import check_installed, log_and_close, open_asked


def main(argv: Sequence[str] | None = None) -> int:
    """`trainprof run [options] -- script.py args...`; returns the script's exit code."""
    args = parse_run_args(argv)
    if args.nsys:
        from trainprof.commands.nsys_run import run_under_nsys

        return run_under_nsys(args, list(sys.argv[2:] if argv is None else argv))
    with recording_warnings_on_one_line():  # the script's own warnings are left as they are
        return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Runs the script under the profiler and returns the script's exit code."""
    try:
        config = config_from_args(args)
        check_installed(args)
    except (ValueError, TrainprofError) as error:
        print(f"trainprof run: {error}", file=sys.stderr)
        return 2
    target = script_target(args.script, list(args.script_args))
    if target is None:
        print(f"trainprof run: no such script: {args.script}", file=sys.stderr)
        return 2
    with run_timer(live=args.live, wanted=args.record) as timer:
        done = record_script(config, target)
    analysis = None
    if not args.no_analysis and done.recorder.rank == first_recorded_rank(config):
        analysis = _print_analysis(config, done.began)
        from trainprof.report.terminal.memory_breakdown import (
            print_breakdown,  # docs/memory_breakdown.md
        )

        print_breakdown(done.recorder.memory_breakdown())
        if analysis is not None:
            log_and_close(open_asked(args), analysis)
    record_run(args, timer, analysis)
    return done.exit_code


def config_from_args(args: argparse.Namespace) -> ProfileConfig:
    """The `ProfileConfig` that `trainprof run`'s options describe."""
    if args.all_steps:
        schedule: dict[str, int] = {}
    else:
        schedule = {key: getattr(args, key) for key in DEFAULT_SCHEDULE}
        schedule = {k: (v if v is not None else DEFAULT_SCHEDULE[k]) for k, v in schedule.items()}
    return ProfileConfig(
        activities=_split(args.activities),
        schedule_option=schedule,
        output_trace_dir=args.out,
        ranks=_ranks(args.ranks),
        cluster_summary=not getattr(args, "no_cluster_summary", False),
        **{flag: getattr(args, flag) for flag in FLAGS},
    )


def _print_analysis(config: ProfileConfig, began: float) -> Any:
    """Analyses the files this run wrote, prints it and returns it (None when there is none)."""
    try:
        files = run_traces(config, began)
        if not files:
            return  # the recorder has already said why
        print(f"trainprof: {len(files)} trace file(s) in {files[0].parent}",
              file=sys.stderr)
        from trainprof.pipeline import analyze  # the overview and the findings
        from trainprof.report.terminal.report import print_analysis
        from trainprof.trace.load import load_file

        analysis = analyze(load_file(path) for path in files)
        print_analysis(analysis)
        return analysis
    except Exception as error:
        warnings.warn(f"trainprof: the traces were written but could not be analysed ({error})",
                      RecordingWarning, stacklevel=2)


def record_run(args: argparse.Namespace, timer: Any, analysis: Any = None) -> None:
    """With ``--record``: adds this rank's row (with the analysis's findings, when this rank
    printed one); a failure warns and never changes the script's exit code."""
    if timer is None or not args.record:
        return
    try:
        from trainprof.history.store.api import to_record
        from trainprof.history.store.database import History
        from trainprof.history.store.sources import brief_findings

        record = to_record(timer, name=args.name or script_name(args), kind="run",
                           source=str(args.out))
        if analysis is not None:
            record.findings = brief_findings(analysis.findings)
        history = History(args.db)
        run_id = history.record(record)
        print(f"trainprof: recorded as history:{run_id} in {history.path}", file=sys.stderr)
    except Exception as error:  # the run is over and its traces are written: warn, go on
        warnings.warn(f"trainprof: could not add this run to the history ({error})",
                      RecordingWarning, stacklevel=2)


def script_name(args: argparse.Namespace) -> str:
    """``train`` for ``train.py``, the module's last part for ``-m package.module``."""
    if args.script == "-m" and args.script_args:
        return str(args.script_args[0]).rsplit(".", 1)[-1]
    return Path(args.script).stem


def _ranks(text: str | None) -> list[int] | None:
    parts = _split(text)
    if parts is None:
        return None
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"--ranks takes comma-separated rank numbers, not {text!r}")
    return [int(part) for part in parts]


def _split(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


if __name__ == "__main__":
    raise SystemExit(main())
