"""The progress bar shows only on a terminal, and only once loading passes the delay."""

from __future__ import annotations

import io
import time
from pathlib import Path

from rich.console import Console

from trainprof.commands import progress


def terminal(buf: io.StringIO) -> Console:
    return Console(file=buf, force_terminal=True, width=100)


def test_bar_appears_after_the_delay(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.05)
    buf = io.StringIO()
    with progress.delayed_progress(True, terminal(buf)) as update:
        assert update is not None
        update(1, 4, Path("rank1.json.gz"))
        time.sleep(0.4)
    assert "Analysing rank1.json.gz" in buf.getvalue()


def test_fast_loads_show_nothing():
    buf = io.StringIO()
    with progress.delayed_progress(True, terminal(buf)) as update:
        update(1, 1, Path("t.json"))
    assert buf.getvalue() == ""


def test_never_when_not_a_terminal_or_disabled():
    plain = Console(file=io.StringIO(), force_terminal=False)
    with progress.delayed_progress(True, plain) as update:
        assert update is None
    with progress.delayed_progress(False, terminal(io.StringIO())) as update:
        assert update is None


def test_bar_shows_the_json_read_of_a_big_file(monkeypatch):
    import gzip

    from trainprof.trace.load import load_file

    from helpers.paths import BIG_TRACE

    json_mb = len(gzip.decompress(BIG_TRACE.read_bytes())) / 1e6
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.01)
    buf = io.StringIO()
    with progress.delayed_progress(True, terminal(buf)) as update:
        update(0, 1, BIG_TRACE)
        time.sleep(0.2)
        load_file(BIG_TRACE, workers=1)
        time.sleep(0.4)
    assert f"0/1 files, {json_mb:,.0f} MB read" in buf.getvalue()
