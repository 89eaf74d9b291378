"""``trainprof run --live`` and ``--record``: a step timer beside the profiler.

The timer sees the script without changes: a step ends at each ``optimizer.step()`` (as the
profiler's steps do), backward through ``torch.autograd.backward``, and every DataLoader batch
is timed as the data phase of its step, its size counted for samples/s. The forward pass is
not known (the runner does not know which module is the model): it is part of "other".

With ``--record`` every rank adds its timer's row to the history (the steps of the whole run,
not only the profiled window); the rank that prints the analysis adds the trace's findings to
its row. A failure to record warns and never changes the script's exit code.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainprof.capture.safety import RecordingWarning
from trainprof.capture.steps import StepTimer
from trainprof.history.cli import add_record_arguments


def add_live_and_record_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--live", action="store_true",
                        help="show a live panel of step time, phases, samples/s, memory and "
                             "the top finding (rank 0; log lines when not a terminal)")
    add_record_arguments(parser)


@contextmanager
def run_timer(args: argparse.Namespace) -> Iterator[StepTimer | None]:
    """A step timer for the script's run when ``--live`` or ``--record`` asks for one."""
    if not (args.live or args.record):
        yield None
        return
    timer = StepTimer(log_every=None, live=args.live)
    try:
        with timed_data_loaders(timer):
            yield timer
    finally:
        timer.close()


@contextmanager
def timed_data_loaders(timer: StepTimer) -> Iterator[None]:
    """Every DataLoader's ``next()`` goes through ``timer.fetch`` while the script runs."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original = _BaseDataLoaderIter.__next__

    def timed_next(self: Any) -> Any:
        return timer.fetch(lambda: original(self))

    _BaseDataLoaderIter.__next__ = timed_next  # type: ignore[method-assign]
    try:
        yield
    finally:
        _BaseDataLoaderIter.__next__ = original  # type: ignore[method-assign]


def record_run(args: argparse.Namespace, timer: StepTimer | None, analysis: Any = None) -> None:
    """Adds this rank's row (with the analysis's findings, when this rank printed one)."""
    if timer is None or not args.record:
        return
    try:
        from trainprof.capture.timer_history import timer_record
        from trainprof.history.api import with_context
        from trainprof.history.sources import brief_findings
        from trainprof.history.store import History

        record = timer_record(timer, args.name or script_name(args), kind="run",
                              source=str(args.out))
        if analysis is not None:
            record.findings = brief_findings(analysis.findings)
        history = History(args.db)
        run_id = history.record(with_context(record, {}))
        print(f"trainprof: recorded as history:{run_id} in {history.path}", file=sys.stderr)
    except Exception as error:  # the run is over and its traces are written: warn, go on
        warnings.warn(f"trainprof: could not add this run to the history ({error})",
                      RecordingWarning, stacklevel=2)


def script_name(args: argparse.Namespace) -> str:
    """``train`` for ``train.py``, the module's last part for ``-m package.module``."""
    if args.script == "-m" and args.script_args:
        return str(args.script_args[0]).rsplit(".", 1)[-1]
    return Path(args.script).stem
