"""Each strategy in a process of its own (`isolate=True`): a crash, a hang or a leak in one
strategy spoils only its own row, and each starts with a clean allocator and compile cache.

Processes are started with "spawn" (CUDA cannot be used in a forked child, and a fork of a
process whose OpenMP threads ran can hang), so the workload travels by pickling: its functions
must be importable (defined at module level, not lambdas), and a script that calls `compare()`
needs the usual `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from multiprocessing.connection import Connection

import torch

from trainprof.bench.results import StrategyResult
from trainprof.bench.strategies import Strategy
from trainprof.bench.training import RunSettings, run_strategy
from trainprof.bench.workload import Workload
from trainprof.errors import BenchError

#: Seconds a finished child gets to exit before it is killed.
EXIT_GRACE_S = 10.0


def run_isolated(workload: Workload, strategy: Strategy, settings: RunSettings,
                 timeout_s: float | None = None) -> StrategyResult:
    """`run_strategy` in a new process; a crash or a timeout becomes a failed row."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    # Not a daemon, which could not start DataLoader workers; it is killed below if need be.
    child = context.Process(target=_child, args=(sender, workload, strategy, settings,
                                                 torch.get_num_threads()),
                            name=f"trainprof-bench-{strategy.name}")
    try:
        child.start()
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise BenchError(
            "isolate=True sends the workload to a new process, so its functions must be "
            f"importable (module level, not lambdas or local functions): {exc}."
        ) from exc
    finally:
        sender.close()
    result: StrategyResult | str = "interrupted"
    try:
        result = _receive(receiver, timeout_s)
    finally:
        receiver.close()
        child.join(0 if result in ("timeout", "interrupted") else EXIT_GRACE_S)
        if child.is_alive():  # hung, timed out, or interrupted: never left behind
            child.kill()
            child.join()
    if isinstance(result, StrategyResult):
        return result
    if result == "timeout":
        reason = f"took longer than {timeout_s:g} s and was stopped"
    else:
        reason = _exit_reason(child.exitcode)
    return StrategyResult(strategy.name, strategy.description, "failed",
                          f"{reason} (in its own process)")


def _receive(receiver: Connection, timeout_s: float | None) -> StrategyResult | str:
    if not receiver.poll(timeout_s):
        return "timeout"
    try:
        return receiver.recv()
    except (EOFError, OSError):  # the child died before it sent anything
        return "crashed"


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"crashed ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed (signal {-code})"
    return f"exited with code {code} before reporting (its error is printed above)"


def _child(sender: Connection, workload: Workload, strategy: Strategy, settings: RunSettings,
           threads: int) -> None:
    torch.set_num_threads(threads)
    result = run_strategy(workload, strategy, settings)
    sender.send(result)
    sender.close()
