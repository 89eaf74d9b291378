"""Running an unchanged training script under the profiler (``trainprof run``'s recording).

The script runs as ``python train.py`` would run it (same ``sys.argv``, ``__name__ ==
"__main__"``, its directory first on ``sys.path``, its exit code), with the profiler on and a
step marked at each ``optimizer.step()``. Each rank writes its own files; ``run_traces`` says
which files this run wrote, waiting a while for the other ranks' files. What to do with them
(analyse, print, store) is the command's business (``commands/run.py``).
"""

from __future__ import annotations

import os
import runpy
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from trainprof.capture.config import ProfileConfig
from trainprof.capture.job_summary import stop_before_group_ends
from trainprof.capture.profiler import Recorder
from trainprof.capture.ranks import current_rank, world_size
from trainprof.capture.writer import traces_written_since

#: How long the rank that reads the traces waits for the other ranks' trace files to appear.
OTHER_RANKS_WAIT_S = 30.0


class ScriptRun(msgspec.Struct):
    """A finished run: the script's exit code, the recorder (its files, its memory breakdown)
    and when the run began (Unix seconds)."""

    exit_code: int
    recorder: Recorder
    began: float


def record_script(config: ProfileConfig, target: tuple[str, str, list[str]]) -> ScriptRun:
    """Runs ``target`` (see ``script_target``) as ``__main__`` with the profiler on."""
    began = time.time()
    recorder = Recorder(config)
    # The summary is shared when recording stops: at the latest when the script ends its
    # process group, while the ranks can still meet.
    with steps_at_optimizer_step(recorder), stop_before_group_ends(recorder.stop):
        recorder.start()
        exit_code = 1
        try:
            exit_code = run_as_main(*target)
        finally:
            # A failed script does not wait for the others (they may be stuck or gone).
            recorder.stop(wait_for_others=exit_code == 0)
    return ScriptRun(exit_code, recorder, began)


def first_recorded_rank(config: ProfileConfig) -> int:
    """The lowest rank the config records (the one that reads the run's traces)."""
    recorded = [r for r in range(world_size()) if config.records_rank(r)]
    return min(recorded) if recorded else 0


def run_traces(config: ProfileConfig, began: float, wait_s: float = OTHER_RANKS_WAIT_S) -> list[Path]:
    """The trace files this run wrote (older files in the folder are left out), waiting up to
    ``wait_s`` for every recorded rank to have written one."""
    where = config.trace_dir()
    if where is None:  # only the user's on_trace_ready handles the traces
        return []
    out_dir = Path(where)
    expected = {r for r in range(world_size()) if config.records_rank(r)}
    deadline = time.monotonic() + wait_s
    while True:
        found = traces_written_since(out_dir, began)
        ranks = {rank for rank, _ in found}
        if current_rank() not in ranks or expected <= ranks or time.monotonic() > deadline:
            return [path for _, path in found]
        time.sleep(0.2)


def script_target(script: str, script_args: list[str]) -> tuple[str, str, list[str]] | None:
    """("path" or "module", what to run, its arguments), or None for a missing script."""
    if script == "-m" and script_args:
        return "module", script_args[0], script_args[1:]
    if not Path(script).is_file():
        return None
    return "path", script, script_args


def run_as_main(kind: str, target: str, script_args: list[str]) -> int:
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
def steps_at_optimizer_step(recorder: Recorder) -> Iterator[None]:
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
