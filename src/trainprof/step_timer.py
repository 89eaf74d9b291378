"""``trainprof.StepTimer``: the capture layer's step timer, plus ``history=``.

``history=True`` (or a run name) records the timer's summary and every measured step in the
run history at ``close()`` (docs/history.md). The timer only hands over its plain record
(``to_run_record()``); storing it is done here, above both layers, so that ``capture`` never
imports ``history``. A failure to record warns once and never stops training.
"""

from __future__ import annotations

from typing import Any

from trainprof.capture import steps
from trainprof.capture.safety import WarnOnce


class StepTimer(steps.StepTimer):
    __doc__ = steps.StepTimer.__doc__

    def __init__(self, *args: Any, history: bool | str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._history = history

    def close(self) -> None:
        """Closes the timer (``capture.steps.StepTimer.close``), then records the history row
        if asked, once."""
        super().close()
        if self._history:
            history, self._history = self._history, None
            record_timer(self, history, self._warn)  # the timer's one warning


def record_timer(timer: steps.StepTimer, history: bool | str, warn: WarnOnce) -> int | None:
    """Records the timer in the history (``history``: True, or the run's name); a failure warns
    once, says where the row was kept, and returns None."""
    from trainprof.history.store.api import record
    from trainprof.history.store.context import default_name

    name = history if isinstance(history, str) else default_name()
    try:
        return record(timer, name=name)
    except Exception as error:  # a full disk or a damaged database must not stop training
        warn("could not add this run to the history", error)
        return None
