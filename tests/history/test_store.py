"""The history database: many writers at once, locked and damaged files, migrations, filters."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time

import pytest

import trainprof.history as history
from trainprof.history.store import pending, schema
from trainprof.history.store.database import History

WRITERS = 8
ROWS_EACH = 25


def summary(median: float = 10.0, samples_per_s: float | None = 800.0) -> dict:
    """A StepTimer summary, as `StepTimer.summary()` returns it."""
    return {"steps": 40, "excluded_steps": 1, "device": "cpu",
            "step_ms": {"mean": median * 1.02, "median": median, "p90": median * 1.1,
                        "min": median * 0.9, "max": median * 1.3},
            "phases_ms": {"data": 1.0, "forward": 3.0, "backward": 4.0, "optimizer": 1.0,
                          "other": 1.0},
            "samples_per_s": samples_per_s, "tokens_per_s": None, "peak_memory_bytes": 1 << 20,
            "flops_per_step": None, "peak_flops": None, "mfu": None}


def write_rows(db: str, writer: int, barrier) -> None:  # noqa: ANN001
    """One process's rows, each through the public API (a connection per row, as ranks do)."""
    barrier.wait()
    for i in range(ROWS_EACH):
        history.record(summary(10.0 + i), name=f"writer{writer}", db=db, git_commit="c0ffee",
                       rank=writer, job="job-1")


def test_eight_processes_writing_at_once_lose_no_row(tmp_path):
    db = tmp_path / "history.db"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=write_rows, args=(str(db), w, barrier)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == WRITERS * ROWS_EACH
        per_writer = dict(conn.execute("SELECT name, count(*) FROM runs GROUP BY name"))
        assert per_writer == {f"writer{w}": ROWS_EACH for w in range(WRITERS)}
        assert conn.execute("SELECT count(DISTINCT uid) FROM runs").fetchone()[0] == 200
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert not pending.has_pending(db)  # nothing had to wait outside the database


def test_a_damaged_file_raises_the_documented_error_and_keeps_the_run(tmp_path):
    db = tmp_path / "history.db"
    db.write_bytes(b"these bytes are not a SQLite database " * 200)
    with pytest.raises(history.HistoryCorruptError) as caught:
        history.record(summary(), name="kept", db=db)
    message = str(caught.value)
    assert str(db) in message and "damaged" in message
    kept = pending.pending_path(db)
    assert str(kept) in message
    assert json.loads(kept.read_text().splitlines()[0])["name"] == "kept"
    with pytest.raises(history.HistoryCorruptError):  # reading says so too
        History(db).runs()
    # Moved aside, as the message says: the next write starts a new history and adds the kept run.
    db.rename(tmp_path / "damaged.db")
    history.record(summary(12.0), name="after", db=db)
    assert [r.name for r in History(db).runs()] == ["kept", "after"]
    assert not pending.has_pending(db)


def test_a_garbled_database_is_reported_as_damaged(tmp_path):
    db = tmp_path / "history.db"
    for i in range(30):
        history.record(summary(10.0 + i), name="run", db=db, git_commit="a")
    data = db.read_bytes()
    db.write_bytes(data[:100] + b"\xff" * 50 + data[150:])  # the schema page's header garbled
    with pytest.raises(history.HistoryCorruptError) as caught:
        History(db).runs()
    assert str(db) in str(caught.value)


def test_a_locked_database_keeps_the_row_and_the_next_write_adds_it(tmp_path):
    db = tmp_path / "history.db"
    history.record(summary(), name="first", db=db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a long write
    impatient = History(db, retry_for_s=0.3, busy_timeout_s=0.05)
    with pytest.raises(history.HistoryBusyError) as caught:
        impatient.record(history.to_record(summary(), name="waited", git_commit="x"))
    assert "locked" in str(caught.value) and str(pending.pending_path(db)) in str(caught.value)
    holder.execute("ROLLBACK")
    holder.close()
    history.record(summary(), name="third", db=db)
    assert [r.name for r in History(db).runs()] == ["first", "waited", "third"]  # by time
    assert not pending.has_pending(db)


def test_a_version_1_database_is_migrated_and_keeps_its_rows(tmp_path):
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    schema.migrate(conn, upto=1)  # the layout an older trainprof wrote
    conn.execute("COMMIT")
    conn.execute("INSERT INTO runs (uid, name, recorded_at, kind, steps, step_ms_median, "
                 "phases_ms, findings) VALUES ('u1', 'old', 1.7e9, 'analysis', 6, 177.4, "
                 "'{\"data\": 69.3}', '[{\"id\": \"data_loading\", \"saving_pct\": 33.4}]')")
    conn.close()
    assert _version(db) == 1
    runs = History(db).runs()
    assert _version(db) == schema.LATEST == 2
    assert [(r.name, r.step_ms_median, r.phases_ms, r.step_times_ms) for r in runs] == [
        ("old", 177.4, {"data": 69.3}, [])]
    assert runs[0].top_finding["id"] == "data_loading"
    new_id = history.record(summary(), name="new", db=db, step_times_ms=[1.0, 2.0])
    assert History(db).get(new_id).step_times_ms == [1.0, 2.0]


def test_a_newer_schema_and_a_foreign_database_are_refused(tmp_path):
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {schema.LATEST + 1}")
    with pytest.raises(history.HistoryVersionError, match="newer trainprof"):
        History(newer).runs()
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(history.HistoryInputError, match="something else"):
        history.record(summary(), name="x", db=foreign)
    assert _version(foreign) == 0  # left as it was


def test_reading_a_missing_database_says_how_to_make_one(tmp_path):
    with pytest.raises(history.HistoryError, match="--record"):
        History(tmp_path / "none.db").runs()
    assert not (tmp_path / "none.db").exists()


def test_filters_by_name_date_and_commit(tmp_path):
    db = tmp_path / "h.db"
    rows = [("resnet", "aaaa1111", 1000.0), ("resnet", "bbbb2222", 2000.0),
            ("bert", "aaaa1111", 3000.0), ("resnet-big", "cccc3333", 4000.0)]
    for name, commit, at in rows:
        history.record(summary(), name=name, db=db, git_commit=commit, recorded_at=at)
    h = History(db)
    assert [r.recorded_at for r in h.runs(name="resnet")] == [1000.0, 2000.0]
    assert [r.name for r in h.runs(name="resnet*")] == ["resnet", "resnet", "resnet-big"]
    assert [r.name for r in h.runs(commit="aaaa")] == ["resnet", "bert"]
    assert [r.recorded_at for r in h.runs(since=2000.0, until=4000.0)] == [2000.0, 3000.0]
    assert [r.recorded_at for r in h.runs(limit=2)] == [3000.0, 4000.0]
    assert h.runs(commit="a%") == []  # a LIKE wildcard in the prefix is taken literally


def test_the_environment_variable_moves_the_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    history.record(summary(), name="default")
    assert (tmp_path / ".trainprof" / "history.db").is_file()
    monkeypatch.setenv("TRAINPROF_HISTORY_DB", str(tmp_path / "elsewhere.db"))
    history.record(summary(), name="moved")
    assert [r.name for r in History().runs()] == ["moved"]


def test_a_record_carries_where_and_when(tmp_path):
    before = time.time()
    run_id = history.record(summary(), name="ctx", db=tmp_path / "h.db")
    r = History(tmp_path / "h.db").get(run_id)
    assert before <= r.recorded_at <= time.time()
    assert r.host and r.kind == "step_timer" and r.steps == 40
    assert r.samples_per_step == pytest.approx(800.0 * 10.2 / 1e3, abs=1e-3)
    with pytest.raises(history.HistoryInputError, match="No run with id 99"):
        History(tmp_path / "h.db").get(99)


def _version(db) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


def test_only_the_ranks_of_a_distributed_job_share_a_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")  # an interactive allocation: analyses stay apart
    db = tmp_path / "h.db"
    alone = history.record(summary(), name="x", db=db)
    rank = history.record(summary(), name="x", db=db, rank=1, world_size=4)
    assert History(db).get(alone).job is None
    assert History(db).get(rank).job == "slurm:77.0"
