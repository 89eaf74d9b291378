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
from collections.abc import Iterator

_CAN_BLOCK = hasattr(signal, "pthread_sigmask")  # not on Windows


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """SIGINT held back in this thread (and in the threads and processes it starts meanwhile)
    until the block ends; one that came meanwhile then raises KeyboardInterrupt."""
    if not _CAN_BLOCK:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_interrupts() -> None:
    """In a worker: SIGINT ignored from now on (one held back since its start is dropped),
    then no longer blocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _CAN_BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
