"""Rows that could not reach the database wait in a JSON-lines file beside it.

When the database stays locked or is damaged, the row is appended to ``<db>.pending.jsonl``
(one line, one ``write``, under an exclusive ``flock``) instead of being lost; the next write
that gets the database's write lock claims the file (a rename), adds its rows and deletes it.
Rows carry a unique ``uid``, so a claim that is added twice (a crash between commit and delete)
adds nothing the second time. An appender that finds the path renamed under it opens it again,
so no line goes to a claimed file after it was read.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from trainprof.history.store.rows import RunRecord

try:  # POSIX; elsewhere appends are unlocked (single short writes)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

PENDING_SUFFIX = ".pending.jsonl"
_CLAIM_GLOB = ".pending.*.claimed.jsonl"


def pending_path(db: Path) -> Path:
    return db.with_name(db.name + PENDING_SUFFIX)


def keep(db: Path, record: RunRecord) -> Path:
    """Appends the record to the pending file; returns its path. Raises OSError if it cannot."""
    path = pending_path(db)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record.to_dict(), default=str) + "\n").encode()
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not _same_file(fd, path):  # claimed while we waited: write to a new one
                    continue
            os.write(fd, line)
            os.fsync(fd)
            return path
        finally:
            os.close(fd)


def has_pending(db: Path) -> bool:
    return pending_path(db).exists() or any(db.parent.glob(db.name + _CLAIM_GLOB))


@contextlib.contextmanager
def claimed(db: Path) -> Iterator[list[RunRecord]]:
    """The pending rows, claimed for adding: call only while holding the database's write lock.

    The claimed files are deleted when the block ends without an exception (the caller has
    committed); otherwise they stay, and a later writer adds them.
    """
    path = pending_path(db)
    if path.exists():
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, db.with_name(f"{db.name}.pending.{uuid.uuid4().hex}.claimed.jsonl"))
    claims = sorted(db.parent.glob(db.name + _CLAIM_GLOB))
    records = [r for claim in claims for r in _read(claim)]
    yield records
    for claim in claims:
        with contextlib.suppress(FileNotFoundError):
            claim.unlink()


def _read(path: Path) -> list[RunRecord]:
    """The rows of a claimed file, waiting for an appender that still holds it to finish."""
    with open(path, "rb") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        lines = handle.read().decode("utf-8", "replace").splitlines()
    out = []
    for line in lines:
        with contextlib.suppress(ValueError, TypeError):  # a torn last line is skipped
            out.append(RunRecord.from_dict(json.loads(line)))
    return out


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False
