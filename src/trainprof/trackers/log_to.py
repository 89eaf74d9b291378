"""``--log-to`` on the command line (``trainprof analyze``, ``trainprof run``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainprof.trackers import TRACKER_NAMES


def add_log_to_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-to", action="append", choices=TRACKER_NAMES, default=None,
                        metavar="TRACKER",
                        help="also log the figures, findings, report and JSON result to "
                             f"{', '.join(TRACKER_NAMES)} (repeatable; docs/trackers.md)")


def check_installed(args: argparse.Namespace) -> None:
    """A ``TrainprofError`` now, before a long run, when a tracker's package is missing."""
    from trainprof.trackers.extras import require

    for name in dict.fromkeys(getattr(args, "log_to", None) or []):
        require({"tensorboard": "tensorboard.summary"}.get(name, name), name)


def open_asked(args: argparse.Namespace) -> list[Any]:
    """The trackers ``--log-to`` asked for, opened (a missing package: exit 2)."""
    from trainprof.trackers.resolve import open_trackers

    names = list(dict.fromkeys(getattr(args, "log_to", None) or []))
    return open_trackers(names) if names else []


def log_and_close(trackers: list[Any], analysis: Any | None) -> None:
    """Log ``analysis`` (None: the analysis failed), close every tracker, and say on stderr
    where a tracker that writes files (TensorBoard) wrote them."""
    if not trackers:
        return
    from trainprof.trackers.log import log_analysis

    folders = [files_folder(tracker) for tracker in trackers]
    if analysis is not None:
        log_analysis(analysis, trackers)
    for tracker, folder in zip(trackers, folders, strict=True):
        tracker.close()
        if analysis is not None and folder is not None and not getattr(tracker, "failed", False):
            print(f"trainprof: wrote the TensorBoard files to {folder} "
                  f"(tensorboard --logdir {folder})", file=sys.stderr)


def files_folder(tracker: Any) -> Any:
    """The folder a tracker that writes files (TensorBoard) writes to, else None (a
    ``Guarded`` tracker is looked into)."""
    return getattr(getattr(tracker, "tracker", tracker), "logdir", None)
