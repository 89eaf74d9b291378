"""Keeps the profiler's own chatter out of the user's terminal.

Kineto prints ``USDT: ... profiler_start`` / ``profiler_stop`` lines (and ``STAGE:`` lines at
some log levels) and c10 warns that "Memory block of unknown size was allocated before the
profiling started" on every recording: noise in the middle of a training log. Kineto's log
level cannot hide them without hiding its errors too, so, only around the calls that print
them (starting, stopping and the steps where the schedule changes state), the process's stderr
(file descriptor 2) goes to a temporary file, and every line that is not such chatter is written
back afterwards: errors are never hidden, only known noise is dropped. ``TRAINPROF_VERBOSE=1``
(``-v`` on ``trainprof run`` and ``trainprof demo``) shows everything.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

VERBOSE_ENV = "TRAINPROF_VERBOSE"
#: Lines dropped: Kineto's stage and USDT probes, and c10's note on blocks allocated before
#: profiling (the profiler's own limitation, nothing for the user to do).
CHATTER = re.compile(
    rb"^(?:(?:USDT|STAGE):\S* \S+ \S+ \S+\.cpp:\d+\] .*"
    rb"|\[W\S* \S+ CPUAllocator\.cpp:\d+\] Memory block of unknown size was allocated before "
    rb"the profiling started.*)$"
)


def verbose() -> bool:
    """Whether the user asked to see the profiler's own log lines."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def without_chatter(data: bytes) -> bytes:
    """``data`` less the lines that are known profiler chatter."""
    return b"".join(line for line in data.splitlines(keepends=True)
                    if not CHATTER.match(line.rstrip(b"\r\n")))


class QuietStderr:
    """Filters file descriptor 2 around a call; reusable (one temporary file for all calls)."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        if verbose():
            yield
            return
        try:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            if self._file is None:
                self._file = tempfile.TemporaryFile()  # noqa: SIM115 (kept open across calls; close())
            self._file.seek(0)
            self._file.truncate()
            saved = os.dup(2)
            os.dup2(self._file.fileno(), 2)
        except OSError:  # no fd 2, no temporary folder: print as it comes
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            self._replay()

    def _replay(self) -> None:
        assert self._file is not None
        self._file.seek(0)
        kept = without_chatter(self._file.read())
        if kept:
            with contextlib.suppress(OSError):
                os.write(2, kept)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


#: c10's own log level for processes trainprof starts torch in (`trainprof run`, `demo`).
C10_LEVEL_ENV = "TORCH_CPP_LOG_LEVEL"


def quiet_c10_warnings() -> None:
    """Before torch is imported by `trainprof run` or `trainprof demo`: c10 logs at ERROR, so that its note on blocks allocated before profiling (printed in
    the middle of a step, where no stderr filter can sit) stays out of the terminal. Errors
    still show; a level the user set, ``TRAINPROF_VERBOSE`` or an already imported torch leave
    everything as it is."""
    if verbose() or "torch" in sys.modules or C10_LEVEL_ENV in os.environ:
        return
    os.environ[C10_LEVEL_ENV] = "ERROR"
