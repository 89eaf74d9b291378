"""Ctrl-C and trainprof's own worker processes (docs/robustness.md, "Ctrl-C").

A terminal's Ctrl-C sends SIGINT to every process of its foreground group: this process and
its workers. The workers ignore it (their parent stops them); this process raises
KeyboardInterrupt wherever Python next checks for signals. Two moments must not be cut by that
exception: starting a worker (cut between the fork and the moment the parent records the
child, the child is left running unknown to the parent; a forked child that gets SIGINT before
it ignores it raises in the parent's code, or the exception is swallowed inside an at-fork
handler, and a parent whose exception is swallowed there waits for its children forever) and
stopping the workers. ``held_interrupts`` blocks SIGINT over such a moment, so that one that
arrives meanwhile is delivered, and raised, as it ends. A worker started inside it inherits the
block (across ``exec`` too) and calls ``ignore_interrupts`` first.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

_CAN_BLOCK = hasattr(signal, "pthread_sigmask")  # not on Windows


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """SIGINT held back in this thread (and in the threads and processes it starts meanwhile)
    until the block ends; one that came meanwhile then raises KeyboardInterrupt.

    Blocking the signal is not enough in a process with other threads: the kernel then gives a
    process-wide SIGINT to a thread that does not block it (numpy's OpenBLAS starts one at
    import), and Python raises KeyboardInterrupt in the main thread at its next instruction,
    mask or not. So in the main thread the block also puts a handler in place that only notes
    the signal; the previous handler runs for it as the block ends."""
    if not _CAN_BLOCK:
        yield
        return
    arrived: list[int] = []
    previous_handler = _note_interrupts(arrived)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if previous_handler is not None:
            _deliver_held(previous_handler, arrived)


def held_call(stop: Callable[[], None]) -> None:
    """``stop()`` with SIGINT held back (``held_interrupts``), and run whenever a Ctrl-C comes:
    one that arrives as the hold is being set up, before SIGINT is blocked, raises
    KeyboardInterrupt before the block's body runs; ``stop`` then runs again, held, and the
    interrupt is raised after it, as one that comes during it is. For stopping workers, where a
    skipped stop leaves a child running or unreaped."""
    interrupted: KeyboardInterrupt | None = None
    done = False
    while not done:
        try:
            with held_interrupts():
                stop()
                done = True
        except KeyboardInterrupt as exc:
            interrupted = exc
    if interrupted is not None:
        raise interrupted


def _note_interrupts(arrived: list[int]) -> Any:
    """In the main thread: a SIGINT handler that only notes each signal in ``arrived``; the
    handler it replaces. None elsewhere (handlers run in, and are set from, the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))


def _deliver_held(previous: Any, arrived: list[int]) -> None:
    """The previous handler back, called for a SIGINT noted meanwhile (Python's default one
    raises KeyboardInterrupt; an enclosing block's notes it in turn)."""
    # A SIGINT still pending when the mask was lifted reaches Python's handler after this one
    # is restored, or first: noted here then, it is delivered below.
    signal.signal(signal.SIGINT, previous)
    if not arrived:
        return
    if callable(previous):
        previous(signal.SIGINT, None)
    elif previous == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)


def ignore_interrupts() -> None:
    """In a worker: SIGINT ignored from now on (one held back since its start is dropped),
    then no longer blocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _CAN_BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
