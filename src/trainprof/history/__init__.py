"""The run history: every recorded run in a SQLite database, its trend, and its regressions.

    import trainprof.history as history

    run_id = history.record(trainprof.analyze("traces/"), name="resnet50")
    for run in history.History().runs(name="resnet50"):
        print(run.id, run.step_ms_median, run.samples_per_s)

Layering: ``store/`` (``rows``, ``database``, ``schema``, ``pending``, ``sources``, ``context``,
``api``) needs only the standard library, numpy and msgspec, so a step timer's plain record
(``StepTimer.to_run_record()``) can be stored while training; nothing here imports the
recorder (``capture``). ``regress``, ``render``, ``export``, ``html`` and ``compare_input`` read the history
for people and sit at the report end (they use ``trainprof.stats`` and ``report.html.svg``).
See docs/history.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainprof.lazy import lazy_names

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "History",
    "HistoryBusyError",
    "HistoryCorruptError",
    "HistoryError",
    "HistoryInputError",
    "HistoryVersionError",
    "RunRecord",
    "db_path",
    "record",
    "to_record",
]

# Served lazily, so that importing the package stays cheap.
_LAZY = {
    "record": "trainprof.history.store.api", "to_record": "trainprof.history.store.api",
    "RunRecord": "trainprof.history.store.rows", "History": "trainprof.history.store.database",
    "DB_ENV": "trainprof.history.store.database", "DEFAULT_DB": "trainprof.history.store.database",
    "db_path": "trainprof.history.store.database",
    **dict.fromkeys(("HistoryBusyError", "HistoryCorruptError", "HistoryError",
                     "HistoryInputError", "HistoryVersionError"), "trainprof.history.store.errors"),
}

if TYPE_CHECKING:  # pragma: no cover
    from trainprof.history.store.api import record, to_record
    from trainprof.history.store.database import DB_ENV, DEFAULT_DB, History, db_path
    from trainprof.history.store.errors import (
        HistoryBusyError,
        HistoryCorruptError,
        HistoryError,
        HistoryInputError,
        HistoryVersionError,
    )
    from trainprof.history.store.rows import RunRecord


__getattr__ = lazy_names(__name__, _LAZY)
