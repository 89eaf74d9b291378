"""The gunzip thread ahead of the reader: same bytes, same errors, no thread left behind."""

from __future__ import annotations

import gzip
import json
import os
import threading

import pytest

from trainprof.errors import TraceError
from trainprof.trace import stream
from trainprof.trace.load import load_file


def big_gzip_trace(path, events=80_000):
    """A trace whose gzip is over PREFETCH_MIN_BYTES (random names barely compress)."""
    evs = [{"ph": "X", "cat": "cpu_op", "name": os.urandom(24).hex(), "pid": 1, "tid": 1,
            "ts": i * 10, "dur": 5} for i in range(events)]
    data = json.dumps({"traceEvents": evs}).encode()
    path.write_bytes(gzip.compress(data, compresslevel=1))
    assert path.stat().st_size >= stream.PREFETCH_MIN_BYTES
    return data


def no_gunzip_thread():
    return not any(t.name == "trainprof-gunzip" for t in threading.enumerate())


def test_prefetched_blocks_are_the_file(tmp_path):
    data = big_gzip_trace(tmp_path / "t.json.gz")
    assert b"".join(stream.byte_blocks(tmp_path / "t.json.gz")) == data
    assert no_gunzip_thread()


def test_a_load_with_the_thread_equals_one_without(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    big_gzip_trace(path)
    threaded = load_file(path, workers=1)
    monkeypatch.setattr(stream, "PREFETCH_MIN_BYTES", 2**62)
    serial = load_file(path, workers=1)
    assert threaded.events.names == serial.events.names
    assert (threaded.events.ts == serial.events.ts).all() and len(serial.events.ts) == 80_000
    assert no_gunzip_thread()


def test_a_truncated_gzip_is_the_same_error_from_the_thread(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    big_gzip_trace(path)
    path.write_bytes(path.read_bytes()[:-100_000])
    with pytest.raises(TraceError) as threaded:
        load_file(path, workers=1)
    monkeypatch.setattr(stream, "PREFETCH_MIN_BYTES", 2**62)
    with pytest.raises(TraceError) as serial:
        load_file(path, workers=1)
    assert str(threaded.value) == str(serial.value)
    assert no_gunzip_thread()


def test_leaving_early_stops_the_thread(tmp_path):
    path = tmp_path / "t.json.gz"
    big_gzip_trace(path)
    blocks = stream.byte_blocks(path)
    next(blocks)
    assert not no_gunzip_thread()  # it is ahead of us now
    blocks.close()
    assert no_gunzip_thread()
