"""Running alone under ``pytest -n``: a recording whose figures depend on timing (a balanced
pipeline's stages, a healthy control's step variance, a slow rank named by its delay) must not
share the 2 cores with the other worker's tests, or their load becomes its imbalance.

Every test holds a shared lock over its whole run, fixtures included (tests/conftest.py); ``alone()`` takes the lock
exclusively, so it waits for the other worker's current test to end and holds back its next one.
The lock is one file for the whole run, named by ``TRAINPROF_TEST_LOCK``, which the first pytest
process sets for its workers. Each process holds the lock through one file descriptor, so taking
it exclusively inside a test converts the test's own shared lock rather than waiting for it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # not POSIX: no other worker to wait for
    fcntl = None  # type: ignore[assignment]

ENV = "TRAINPROF_TEST_LOCK"
_fd: int | None = None
_held = 0  # fcntl.LOCK_SH, LOCK_EX, or 0
_created: str | None = None  # the lock file, in the process that named it


def name_the_lock() -> None:
    """In the first pytest process: the lock file its workers will share."""
    global _created
    if ENV not in os.environ:
        handle, _created = tempfile.mkstemp(prefix="trainprof-tests-", suffix=".lock")
        os.close(handle)
        os.environ[ENV] = _created


def remove_the_lock() -> None:
    """In the process that named it, once the run is over."""
    if _created is not None:
        with contextlib.suppress(OSError):
            os.unlink(_created)


def _set(mode: int) -> None:
    global _fd, _held
    if fcntl is None or ENV not in os.environ:
        return
    if _fd is None:
        _fd = os.open(os.environ[ENV], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(_fd, mode if mode else fcntl.LOCK_UN)
    _held = mode


@contextlib.contextmanager
def _holding(mode: int) -> Iterator[None]:
    before = _held
    _set(mode)
    try:
        yield
    finally:
        _set(before)


def alone() -> contextlib.AbstractContextManager[None]:
    """No other test of this run runs meanwhile (in any worker)."""
    return _holding(fcntl.LOCK_EX if fcntl else 0)


def beside_others() -> contextlib.AbstractContextManager[None]:
    """Other tests may run meanwhile; one that runs ``alone()`` waits for this one."""
    return _holding(fcntl.LOCK_SH if fcntl else 0)
