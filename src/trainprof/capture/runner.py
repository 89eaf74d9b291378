"""`trainprof run`: record an unmodified training script, then print the analysis.

    trainprof run --out traces -- train.py --lr 3e-4
    torchrun --nproc_per_node=2 -m trainprof.capture.runner --out traces -- train.py

The script runs as `python train.py` would run it (same `sys.argv`, `__name__ == "__main__"`,
its directory first on `sys.path`, its exit code), with the profiler on and a step marked at
each `optimizer.step()`. Each rank writes its own files; the lowest recorded rank prints the
analysis of this run's files once the others' files are there.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainprof.capture.cluster import stop_before_group_ends
from trainprof.capture.config import DEFAULT_OUTPUT_DIR, DEFAULT_SCHEDULE, ProfileConfig
from trainprof.capture.profiler import Recorder
from trainprof.capture.ranks import current_rank, world_size
from trainprof.capture.run_timer import add_live_and_record_arguments, record_run, run_timer
from trainprof.capture.safety import RecordingWarning, recording_warnings_on_one_line
from trainprof.cli_parser import OneLineParser, non_negative_int, positive_int
from trainprof.errors import TrainprofError
from trainprof.trackers.cli import add_log_to_argument, check_installed, log_and_close, open_asked

DESCRIPTION = "Run a training script unchanged, with the profiler on, then print the analysis."
#: How long the printing rank waits for the other ranks' trace files to appear.
OTHER_RANKS_WAIT_S = 30.0
_RANK_IN_NAME = re.compile(r"^rank(\d+)\.step\d+\.pt\.trace\.json\.gz$")  # writer.TRACE_FILE_NAME
_FLAGS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules",
          "memory_snapshot")  # the last: CUDA allocator snapshots, docs/memory_snapshots.md


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds `trainprof run`'s options: where to write, what to record, and the script."""
    parser.add_argument("--out", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                        help=f"folder for the trace files (default: {DEFAULT_OUTPUT_DIR})")
    schedule = parser.add_argument_group("schedule (steps are counted at optimizer.step())")
    for key in ("skip_first", "wait", "warmup", "active", "repeat"):
        schedule.add_argument(f"--{key.replace('_', '-')}", dest=key, metavar="N",
                              type=positive_int if key == "active" else non_negative_int,
                              help=f"default {DEFAULT_SCHEDULE[key]}")
    schedule.add_argument("--all-steps", action="store_true",
                          help="record every step as one cycle (no schedule); large traces")
    what = parser.add_argument_group("what to record (as torch.profiler)")
    what.add_argument("--activities", metavar="LIST",
                      help="comma-separated: cpu,cuda,xpu,... (default: what this machine has)")
    for flag in _FLAGS:
        what.add_argument(f"--{flag.replace('_', '-')}", dest=flag, action="store_true")
    parser.add_argument("--ranks", metavar="LIST", help="comma-separated global ranks to record (default: all)")
    parser.add_argument("--no-analysis", action="store_true", help="write the traces, print nothing")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the profiler's own log lines (Kineto, c10)")
    add_live_and_record_arguments(parser)  # --live, --record, --name, --db (capture/run_timer.py)
    add_log_to_argument(parser)  # --log-to mlflow|wandb|tensorboard (docs/trackers.md)
    parser.add_argument("--no-cluster-summary", action="store_true",
                        help="in a distributed job, write no cluster_summary.json (docs/distributed.md)")
    parser.add_argument("script", nargs="?",
                        help="the training script (or -m followed by a module name)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")


def run_command(args: argparse.Namespace) -> int:
    """Runs the script under the profiler and returns the script's exit code."""
    try:
        config = config_from_args(args)
    except ValueError as error:
        print(f"trainprof run: {error}", file=sys.stderr)
        return 2
    try:
        check_installed(args)
    except TrainprofError as error:
        print(f"trainprof run: {error}", file=sys.stderr)
        return 2
    target = _target(args.script, list(args.script_args))
    if target is None:
        print(f"trainprof run: no such script: {args.script}", file=sys.stderr)
        return 2
    began = time.time()
    recorder = Recorder(config)
    # The summary is shared when recording stops: at the latest when the script ends its
    # process group, while the ranks can still meet.
    with run_timer(args) as timer, _steps_at_optimizer_step(recorder), \
            stop_before_group_ends(recorder.stop):
        recorder.start()
        exit_code = 1
        try:
            exit_code = _run_as_main(*target)
        finally:
            # A failed script does not wait for the others (they may be stuck or gone).
            recorder.stop(wait_for_others=exit_code == 0)
    analysis = None
    if not args.no_analysis and recorder.rank == _printing_rank(config):
        analysis = _print_analysis(Path(config.output_trace_dir), config, began)
        from trainprof.report.memory_breakdown import print_breakdown  # docs/memory_breakdown.md

        print_breakdown(recorder.memory_breakdown())
        if analysis is not None:
            log_and_close(open_asked(args), analysis)
    record_run(args, timer, analysis)
    return exit_code


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
        **{flag: getattr(args, flag) for flag in _FLAGS},
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m trainprof.capture.runner [options] -- script.py args...`"""
    parser = OneLineParser(prog="trainprof run", description=DESCRIPTION)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.script is None:
        parser.error("name the training script: trainprof run [options] -- train.py [its args]")
    with recording_warnings_on_one_line():  # the script's own warnings are left as they are
        return run_command(args)


# -- running the script ---------------------------------------------------------------------


def _target(script: str, script_args: list[str]) -> tuple[str, str, list[str]] | None:
    """("path" or "module", what to run, its arguments), or None for a missing script."""
    if script == "-m" and script_args:
        return "module", script_args[0], script_args[1:]
    if not Path(script).is_file():
        return None
    return "path", script, script_args


def _run_as_main(kind: str, target: str, script_args: list[str]) -> int:
    """Runs the script as `__main__` and returns its exit code, as the interpreter would."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    if kind == "path":
        sys.argv = [target, *script_args]
        sys.path.insert(0, str(Path(target).resolve().parent))
    else:
        sys.argv = [target, *script_args]  # runpy replaces argv[0] with the module's file
        sys.path.insert(0, os.getcwd())
    try:
        if kind == "path":
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as stop:
        return _exit_code(stop.code)
    except KeyboardInterrupt:
        return 130
    except BaseException as error:
        _print_script_traceback(error)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _exit_code(code: Any) -> int:
    """`sys.exit`'s argument as the interpreter turns it into an exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_script_traceback(error: BaseException) -> None:
    """The traceback from the script's first frame on, without trainprof's and runpy's frames."""
    tb = error.__traceback__
    while tb is not None and not _is_script_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


def _is_script_frame(filename: str) -> bool:
    return "runpy" not in filename and f"trainprof{os.sep}capture" not in filename


@contextmanager
def _steps_at_optimizer_step(recorder: Recorder) -> Iterator[None]:
    """Marks a profiler step when `step()` of the first optimizer that steps has returned.

    Only the outermost call of the first optimizer counts: a subclass calling `super().step()`,
    or a wrapper around the real optimizer, runs the hooks twice, nested; a GAN's two optimizers
    step once each per training step.
    """
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    depth = 0
    first: list[int] = []

    def enter(optimizer: Any, args: Any, kwargs: Any) -> None:
        nonlocal depth
        depth += 1

    def leave(optimizer: Any, args: Any, kwargs: Any) -> None:
        nonlocal depth
        depth = max(0, depth - 1)
        if depth:
            return
        if not first:
            first.append(id(optimizer))
        if id(optimizer) == first[0]:
            recorder.step()

    handles = [register_optimizer_step_pre_hook(enter), register_optimizer_step_post_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# -- the analysis at the end ----------------------------------------------------------------


def _printing_rank(config: ProfileConfig) -> int:
    recorded = [r for r in range(world_size()) if config.records_rank(r)]
    return min(recorded) if recorded else 0


def _print_analysis(out_dir: Path, config: ProfileConfig, began: float) -> Any:
    """Analyses the files this run wrote (older files in the folder are left out), prints it
    and returns it (None when there is none)."""
    try:
        files = _wait_for_files(out_dir, config, began)
        if not files:
            return  # the recorder has already said why
        print(f"trainprof: {len(files)} trace file(s) in {out_dir}", file=sys.stderr)
        from trainprof import analyze  # the public API: the overview and the findings
        from trainprof.report.text import print_analysis
        from trainprof.trace.load import load_file

        analysis = analyze(load_file(path) for path in files)
        print_analysis(analysis)
        return analysis
    except Exception as error:
        warnings.warn(f"trainprof: the traces were written but could not be analysed ({error})",
                      RecordingWarning, stacklevel=2)


def _wait_for_files(out_dir: Path, config: ProfileConfig, began: float) -> list[Path]:
    """This run's trace files, waiting a while for every recorded rank to have written one."""
    expected = {r for r in range(world_size()) if config.records_rank(r)}
    deadline = time.monotonic() + OTHER_RANKS_WAIT_S
    while True:
        files = _files_since(out_dir, began)
        ranks = {int(_RANK_IN_NAME.match(p.name).group(1)) for p in files}  # type: ignore[union-attr]
        if current_rank() not in ranks or expected <= ranks or time.monotonic() > deadline:
            return files
        time.sleep(0.2)


def _files_since(out_dir: Path, began: float) -> list[Path]:
    if not out_dir.is_dir():
        return []
    found = (p for p in out_dir.iterdir() if _RANK_IN_NAME.match(p.name))
    return sorted(p for p in found if p.stat().st_mtime >= began - 1.0)


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
