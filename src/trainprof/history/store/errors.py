"""What can go wrong with the run history, each as one sentence for a person (CLI exit 2)."""

from __future__ import annotations

from trainprof.errors import TrainprofError


class HistoryError(TrainprofError):
    """The run history cannot be read or written."""


class HistoryCorruptError(HistoryError):
    """The database file is not a SQLite database, or is damaged."""


class HistoryBusyError(HistoryError):
    """Other processes kept the database locked for longer than trainprof waits."""


class HistoryVersionError(HistoryError):
    """The database was written by a newer trainprof, whose schema this one does not know."""


class HistoryInputError(HistoryError):
    """A file given to record, or a history id, is not something the history can hold."""
