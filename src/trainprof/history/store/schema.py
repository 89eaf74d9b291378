"""The database layout, versioned: ``PRAGMA user_version`` says which migrations have run.

A new database runs every migration in order, so the path an old database takes to the latest
layout is the one every new database takes too. Each migration runs inside the writer's
``BEGIN IMMEDIATE`` transaction (SQLite's DDL is transactional): a crash half-way leaves the
old version, and two processes opening an old database at once migrate it once.
"""

from __future__ import annotations

import sqlite3

#: Version 1: one row per recorded run, its figures, phases and findings.
_V1 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT '',
    git_commit TEXT,
    host TEXT,
    devices TEXT,
    world_size INTEGER,
    rank INTEGER,
    job TEXT,
    steps INTEGER NOT NULL DEFAULT 0,
    step_ms_mean REAL,
    step_ms_median REAL,
    step_ms_p90 REAL,
    step_ms_min REAL,
    step_ms_max REAL,
    samples_per_s REAL,
    tokens_per_s REAL,
    peak_memory_bytes INTEGER,
    phases_ms TEXT NOT NULL DEFAULT '{}',
    findings TEXT NOT NULL DEFAULT '[]',
    extra TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX runs_by_name_time ON runs (name, recorded_at);
CREATE INDEX runs_by_commit ON runs (git_commit);
"""

#: Version 2: every step's time (float32, at most records.MAX_STORED_STEPS), so that a
#: regression is judged against the step-to-step noise, and the samples per step, so that a
#: change of batch size starts a new baseline. Rows from version 1 keep NULL: they are judged
#: on their summary figures.
_V2 = """
ALTER TABLE runs ADD COLUMN step_times BLOB;
ALTER TABLE runs ADD COLUMN step_ranks TEXT;
ALTER TABLE runs ADD COLUMN samples_per_step REAL;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2)
LATEST = len(MIGRATIONS)


def version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, upto: int = LATEST) -> int:
    """Runs the migrations after the database's version, up to ``upto``, in the open
    transaction; returns the version before. Never downgrades (the caller refuses newer)."""
    before = version(conn)
    for number in range(before + 1, upto + 1):
        for statement in _statements(MIGRATIONS[number - 1]):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    return before


def _statements(script: str) -> list[str]:
    """One migration's statements (``executescript`` would commit the open transaction)."""
    return [s.strip() for s in script.split(";") if s.strip()]
