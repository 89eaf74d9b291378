"""What a SQLite error means for the history, said in one sentence for a person."""

from __future__ import annotations

from pathlib import Path

from trainprof.history.store.errors import HistoryBusyError, HistoryCorruptError, HistoryError

_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def is_busy(error: BaseException) -> bool:
    """Another process holds the lock: worth waiting for."""
    message = str(error).lower()
    return _code(error).startswith(_BUSY) or "locked" in message or "busy" in message


def is_corrupt(error: BaseException) -> bool:
    """The file is not a SQLite database, or its pages are damaged."""
    message = str(error).lower()
    return (_code(error).startswith(_CORRUPT) or "not a database" in message
            or "malformed" in message)


def write_failure(db: Path, error: Exception, where: str, waited_s: float) -> HistoryError:
    """The error for a row that could not be written; ``where`` says where it was kept."""
    if isinstance(error, HistoryError) and not isinstance(error, HistoryCorruptError):
        return type(error)(f"{str(error).rstrip('.')}; {where}.")
    if isinstance(error, HistoryCorruptError) or is_corrupt(error):
        return HistoryCorruptError(
            f"The history database {db} is damaged ({_detail(error)}); {where}. Move the "
            "damaged file aside (trainprof then starts a new history and adds the kept runs to "
            "it) or restore it from a backup.")
    if is_busy(error):
        return HistoryBusyError(f"The history database {db} stayed locked by other processes "
                                f"for {waited_s:.0f} s; {where}, and the next write adds it.")
    return HistoryError(f"Cannot write the history database {db} ({_detail(error)}); {where}.")


def read_failure(db: Path, error: Exception, waited_s: float) -> HistoryError:
    if is_corrupt(error):
        return HistoryCorruptError(f"The history database {db} is damaged ({_detail(error)}); "
                                   "move it aside or restore a backup.")
    if is_busy(error):
        return HistoryBusyError(f"The history database {db} stayed locked by other processes "
                                f"for {waited_s:.0f} s; try again.")
    return HistoryError(f"Cannot read the history database {db} ({_detail(error)}).")


def _code(error: BaseException) -> str:
    return str(getattr(error, "sqlite_errorname", "") or "")


def _detail(error: BaseException) -> str:
    return str(error).rstrip(".") or type(error).__name__
