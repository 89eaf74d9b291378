"""The profiler's own log lines (Kineto, c10) stay out of the terminal unless ``-v`` asks for
them (capture/native_log.py); for the commands that record: ``run`` and ``demo``."""

from __future__ import annotations

import os


def quiet_profiler(verbose: bool) -> None:
    """Silence the profiler's native log lines, or let them through with ``verbose``."""
    from trainprof.capture.native_log import VERBOSE_ENV, quiet_c10_warnings

    if verbose:
        os.environ[VERBOSE_ENV] = "1"
    quiet_c10_warnings()
