"""The arguments of ``trainprof run`` (``commands/run.py`` runs it).

``run`` parses its own arguments, after ``cli.main`` has handed it everything past the word
``run``, so that the other commands never import torch and the script's own options (after
``--``) reach the script untouched.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainprof.capture.config import DEFAULT_OUTPUT_DIR, DEFAULT_SCHEDULE
from trainprof.cli_history import add_record_arguments
from trainprof.cli_parser import OneLineParser, non_negative_int, positive_int
from trainprof.trackers.log_to import add_log_to_argument

DESCRIPTION = "Run a training script unchanged, with the profiler on, then print the analysis."
#: The recording flags, as torch.profiler names them; then CUDA allocator snapshots
#: (docs/memory_snapshots.md) and NVTX marks for Nsight Systems (docs/nsys.md).
FLAGS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules",
         "memory_snapshot", "nvtx", "nvtx_ops")


def parse_run_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """``trainprof run [options] -- script.py args...``, parsed; a missing script is a usage
    error."""
    parser = OneLineParser(prog="trainprof run", description=DESCRIPTION)
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.script is None:
        parser.error("name the training script: trainprof run [options] -- train.py [its args]")
    return args


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
    for flag in FLAGS:
        what.add_argument(f"--{flag.replace('_', '-')}", dest=flag, action="store_true")
    parser.add_argument("--nsys", action="store_true",
                        help="run the script under Nsight Systems (nsys profile --trace=cuda,"
                             "nvtx,osrt) with NVTX step marks, and analyse its export")
    parser.add_argument("--ranks", metavar="LIST", help="comma-separated global ranks to record (default: all)")
    parser.add_argument("--no-analysis", action="store_true", help="write the traces, print nothing")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show the profiler's own log lines (Kineto, c10)")
    parser.add_argument("--live", action="store_true",
                        help="show a live panel of step time, phases, samples/s, memory and "
                             "the top finding (rank 0; log lines when not a terminal)")
    add_record_arguments(parser)  # --record, --name, --db (docs/history.md)
    add_log_to_argument(parser)  # --log-to mlflow|wandb|tensorboard (docs/trackers.md)
    parser.add_argument("--no-cluster-summary", action="store_true",
                        help="in a distributed job, write no cluster_summary.json (docs/distributed.md)")
    parser.add_argument("script", nargs="?",
                        help="the training script (or -m followed by a module name)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
