"""A progress bar that appears only when loading takes more than a second, on a terminal, and
``with_progress``, which runs a command's work under it. rich is imported only where a bar may
show: a command whose standard error is a file or a pipe never loads it."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trainprof.trace.load import watching_bytes

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

T = TypeVar("T")
#: Loads shorter than this never show a bar.
SHOW_AFTER_S = 1.0


class _DelayedBar:
    def __init__(self, console: Console) -> None:
        self._console = console
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._state = (0, 1, "")
        self._bytes = 0
        self._timer = threading.Timer(SHOW_AFTER_S, self._show)
        self._timer.daemon = True
        self._closed = False

    def start(self) -> None:
        self._timer.start()

    def _show(self) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with self._lock:
            if self._closed:
                return
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,
            )
            done, total, name = self._state
            self._task = self._progress.add_task(f"Analysing {name}", total=total, completed=done,
                                                 detail=self._detail())
            self._progress.start()

    def _detail(self) -> str:
        """``2/8 files``, and the JSON read of the current file (a big one reads for a while)."""
        done, total, _ = self._state
        read = f", {self._bytes / 1e6:,.0f} MB read" if self._bytes else ""
        return f"{done}/{total} files{read}"

    def update(self, done: int, total: int, path: Path) -> None:
        with self._lock:
            if (done, path.name) != self._state[::2]:
                self._bytes = 0
            self._state = (done, total, path.name)
            if self._progress is not None and self._task is not None:
                self._progress.update(
                    self._task, completed=done, total=total, description=f"Analysing {path.name}",
                    detail=self._detail(),
                )

    def read(self, nbytes: int) -> None:
        """The bytes of JSON read so far in the file being loaded."""
        with self._lock:
            self._bytes = nbytes
            if self._progress is not None and self._task is not None:
                self._progress.update(self._task, detail=self._detail())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._timer.cancel()
            if self._progress is not None:
                self._progress.stop()


@contextmanager
def delayed_progress(enabled: bool, console: Console | None = None) -> Iterator:
    """Yield a ``progress(done, total, path)`` callback, or None when disabled."""
    if console is None and enabled and not _surely_not_a_terminal():
        from rich.console import Console

        console = Console(stderr=True)
    if not enabled or console is None or not console.is_terminal:
        yield None
        return
    bar = _DelayedBar(console)
    bar.start()
    try:
        with watching_bytes(bar.read):
            yield bar.update
    finally:
        bar.close()


def _surely_not_a_terminal() -> bool:
    """Whether rich's ``Console(stderr=True).is_terminal`` would be False, told without importing
    rich: standard error is no terminal and neither ``TTY_COMPATIBLE=1`` nor ``FORCE_COLOR``
    says otherwise (rich's other cases, IDLE and Jupyter, are never terminals either)."""
    if os.environ.get("TTY_COMPATIBLE") == "1" or os.environ.get("FORCE_COLOR") is not None:
        return False
    try:
        return not sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one: rich says False too
        return True


def with_progress(work: Callable[[Any], T], show_progress: bool) -> T:
    """``work(progress)`` with a progress bar that shows only on a terminal, after a delay."""
    with delayed_progress(show_progress) as progress:
        return work(progress)
