"""Recording must never break training: failures become one warning, and the loop goes on."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

logger = logging.getLogger("trainprof")


class RecordingWarning(UserWarning):
    """Something went wrong while recording; training carried on without it."""


class WarnOnce:
    """Issues at most one `RecordingWarning` per recording session, however often things fail."""

    def __init__(self) -> None:
        self.warned = False

    def __call__(self, message: str, error: BaseException | None = None) -> None:
        if self.warned:
            logger.debug("trainprof (suppressed repeat): %s %s", message, error or "")
            return
        self.warned = True
        detail = f" ({type(error).__name__}: {error})" if error is not None else ""
        warnings.warn(f"trainprof: {message}{detail}", RecordingWarning, stacklevel=3)


def another_profiler_running() -> bool:
    """Whether a torch profiler is already recording on this thread: a second one would fail, or
    take over the first one's session and leave its user with an empty trace."""
    try:
        import torch

        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # a private API: if it moves, fall back to finding out at start
        return False


@contextlib.contextmanager
def recording_warnings_on_one_line() -> Iterator[None]:
    """Shows a `RecordingWarning` as its one line ("trainprof: ..."); every other warning (the
    user's script's, under `trainprof run`) is shown as it would be without trainprof."""
    previous = warnings.formatwarning

    def formatwarning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, line: str | None = None) -> str:
        if isinstance(category, type) and issubclass(category, RecordingWarning):
            return f"{message}\n"
        return previous(message, category, filename, lineno, line)

    warnings.formatwarning = formatwarning
    try:
        yield
    finally:
        if warnings.formatwarning is formatwarning:
            warnings.formatwarning = previous
