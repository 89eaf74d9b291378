"""The history database: SQLite in WAL mode, safe for every rank of a job writing at once.

Readers never block the writer and the writer never blocks readers (WAL); writers queue on
SQLite's lock, each waiting ``BUSY_TIMEOUT_S`` per try (``BEGIN IMMEDIATE`` takes the write lock
first, so no transaction has to be abandoned half-way), and trainprof retries with a jittered
backoff for ``RETRY_FOR_S``. A row that still cannot be written goes to the pending file
(``history.store.pending``) and the error says where; the next writer adds it.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

from trainprof.display import NotebookDisplay
from trainprof.history.store import failures, pending, schema
from trainprof.history.store.errors import (
    HistoryCorruptError,
    HistoryError,
    HistoryInputError,
    HistoryVersionError,
)
from trainprof.history.store.rows import RunRecord

DB_ENV = "TRAINPROF_HISTORY_DB"
DEFAULT_DB = Path(".trainprof") / "history.db"
#: SQLite's own wait for the lock, per try.
BUSY_TIMEOUT_S = 10.0
#: How long a write keeps trying (with backoff) before the row goes to the pending file.
RETRY_FOR_S = 60.0
FIRST_BACKOFF_S = 0.02
MAX_BACKOFF_S = 2.0

_T = TypeVar("_T")


def db_path(db: str | os.PathLike[str] | None = None) -> Path:
    """``db``, else ``$TRAINPROF_HISTORY_DB``, else ``.trainprof/history.db`` here."""
    return Path(db or os.environ.get(DB_ENV) or DEFAULT_DB)


class History(NotebookDisplay):
    """The run history in one SQLite file. Each call opens its own short connection, so one
    object may be used from a forked process; nothing is held open between calls."""

    def __init__(self, db: str | os.PathLike[str] | None = None, *,
                 retry_for_s: float = RETRY_FOR_S, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = db_path(db)
        self.retry_for_s = retry_for_s
        self.busy_timeout_s = busy_timeout_s

    # -- writing ----------------------------------------------------------------------------

    def record(self, record: RunRecord) -> int:
        """Adds the row (and any pending rows); returns its id. On failure the row is kept in
        the pending file and a `HistoryError` says why and where."""
        try:
            return self._retrying(lambda: self._write(record))
        except (sqlite3.Error, HistoryError, OSError) as error:
            raise self._kept(record, error) from None

    def add_pending(self) -> int:
        """Adds the rows waiting in the pending file; returns how many were new."""
        if not pending.has_pending(self.path):
            return 0
        return self._retrying(lambda: self._write(None))

    def _write(self, record: RunRecord | None) -> int:
        with self._connection(create=True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            _check_integrity(conn, self.path)
            try:
                waiting: AbstractContextManager[list[RunRecord]] = (
                    pending.claimed(self.path) if pending.has_pending(self.path)
                    else contextlib.nullcontext([]))
                with waiting as rows:
                    added = sum(_insert(conn, r) for r in rows)
                    if record is not None:
                        _insert(conn, record)
                        added = conn.execute("SELECT id FROM runs WHERE uid = ?",
                                             (record.uid,)).fetchone()[0]
                    conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        if record is not None:
            record.id = added
        return added

    def _retrying(self, attempt: Callable[[], _T]) -> _T:
        deadline = time.monotonic() + self.retry_for_s
        delay = FIRST_BACKOFF_S
        while True:
            try:
                return attempt()
            except sqlite3.Error as error:
                if not failures.is_busy(error) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, MAX_BACKOFF_S)

    def _kept(self, record: RunRecord, error: Exception) -> HistoryError:
        """The error to raise once the row is safe in the pending file (or could not be)."""
        try:
            where = f"this run was kept in {pending.keep(self.path, record)}"
        except OSError as os_error:
            where = f"this run could not be kept either ({os_error})"
        return failures.write_failure(self.path, error, where, self.retry_for_s)

    # -- reading ----------------------------------------------------------------------------

    def runs(self, *, name: str | None = None, since: float | None = None,
             until: float | None = None, commit: str | None = None,
             limit: int | None = None) -> list[RunRecord]:
        """The rows that match, oldest first; ``name`` may hold glob wildcards (``*``, ``?``),
        ``commit`` is a prefix, ``limit`` keeps the most recent."""
        clauses: list[str] = []
        values: list[str | float] = []
        if name is not None:
            clauses.append("name GLOB ?" if any(c in name for c in "*?[") else "name = ?")
            values.append(name)
        if since is not None:
            clauses.append("recorded_at >= ?")
            values.append(since)
        if until is not None:
            clauses.append("recorded_at < ?")
            values.append(until)
        if commit:
            clauses.append("git_commit LIKE ? ESCAPE '\\'")
            values.append(commit.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        tail = f" LIMIT {int(limit)}" if limit else ""
        sql = f"SELECT * FROM runs {where} ORDER BY recorded_at DESC, id DESC{tail}"
        rows = self._read(lambda conn: conn.execute(sql, values).fetchall())
        return [RunRecord.from_row(r) for r in reversed(rows)]

    def get(self, run_id: int) -> RunRecord:
        """One row by its id; `HistoryInputError` when there is none."""
        row = self._read(lambda c: c.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone())
        if row is None:
            raise HistoryInputError(f"No run with id {run_id} in the history {self.path}.")
        return RunRecord.from_row(row)

    def version(self) -> int:
        return self._read(schema.version)

    def _read(self, query: Callable[[sqlite3.Connection], _T]) -> _T:
        if pending.has_pending(self.path):  # best effort, briefly: a locked database reads
            with contextlib.suppress(HistoryError, sqlite3.Error, OSError):
                History(self.path, retry_for_s=min(1.0, self.retry_for_s),
                        busy_timeout_s=min(0.5, self.busy_timeout_s)).add_pending()
        try:
            def attempt() -> _T:
                with self._connection(create=False) as conn:
                    return query(conn)

            return self._retrying(attempt)
        except sqlite3.Error as error:
            raise failures.read_failure(self.path, error, self.retry_for_s) from None

    # -- connections ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self, create: bool) -> Iterator[sqlite3.Connection]:
        if not create and not self.path.is_file():
            raise HistoryError(f"No run history at {self.path} yet: record runs with "
                               "`trainprof analyze PATH --record` (or --db PATH to read another).")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL").fetchone()  # first read: NOTADB shows here
            self._ensure_schema(conn)
            yield conn
        finally:
            conn.close()

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        found = schema.version(conn)
        if found > schema.LATEST:
            raise HistoryVersionError(
                f"The history database {self.path} has schema version {found}, written by a "
                f"newer trainprof; this one reads up to version {schema.LATEST}. Upgrade "
                "trainprof, or use --db for another file.")
        if found == schema.LATEST:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema.version(conn) == 0 and _has_foreign_tables(conn):
                raise HistoryInputError(f"{self.path} is a SQLite database of something else, "
                                        "not a trainprof history; use --db for another file.")
            schema.migrate(conn)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise


def _insert(conn: sqlite3.Connection, record: RunRecord) -> int:
    """Inserts the row unless its uid is there already; returns 1 if it was new."""
    row = record.to_row()
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    cursor = conn.execute(f"INSERT OR IGNORE INTO runs ({columns}) VALUES ({marks})",
                          list(row.values()))
    return cursor.rowcount


def _has_foreign_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                        "name NOT LIKE 'sqlite_%'").fetchone()[0] > 0


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    """SQLite's own check, before a write: a database damaged in its middle can still take an
    insert into its undamaged pages, and would then lose runs later; refuse it now."""
    found = conn.execute("PRAGMA quick_check(1)").fetchone()
    if not found or found[0] != "ok":
        raise HistoryCorruptError(f"The history database {path} failed SQLite's integrity check "
                                  f"({found[0] if found else 'no answer'})")
