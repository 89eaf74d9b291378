"""One huge string in an event (issue 19): read in time linear in its bytes, and an
unterminated one called truncated. The times themselves are in benchmarks/bench_huge_string.py."""

from __future__ import annotations

import json

import pytest

import trainprof
from trainprof.trace import stream
from trainprof.trace.load import load_file


def trace_text(n_ops: int, huge: str) -> str:
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i,
               "dur": 5, "args": {}} for i in range(n_ops)]
    events.insert(n_ops // 2, {"ph": "X", "cat": "cpu_op", "name": "huge", "pid": 1, "tid": 1,
                               "ts": 3, "dur": 1, "args": {"note": huge}})
    return json.dumps({"traceEvents": events}, indent=1)


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1024)


def test_huge_string_loads_every_event(tmp_path, small_blocks):
    path = tmp_path / "huge.json"
    path.write_text(trace_text(400, "x" * 3_000_000))
    trace = load_file(path)
    names = [trace.events.names[i] for i in trace.events.name]
    assert len(names) == 401
    assert names.count("huge") == 1 and names.count("op399") == 1


def test_unterminated_huge_string_is_truncated(tmp_path, small_blocks):
    text = trace_text(400, "x" * 3_000_000)
    path = tmp_path / "cut.json"
    path.write_text(text[: text.index("x" * 1000) + 2_000_000])
    with pytest.raises(trainprof.TraceError, match="truncated"):
        load_file(path)


@pytest.mark.parametrize(("tail", "expected"), [
    (b'"x": 1', 6),  # no boundary can be open: search the new bytes only
    (b'"x": 1}', 6),  # the '}' may start a boundary the next block completes
    (b'"x": 1}\n ', 6),
    (b'"x": 1} ,\n', 6),
    (b'"x": "a}b"', 10),
    (b"", 0),
])
def test_open_boundary(tail, expected):
    assert stream._open_boundary(bytearray(tail)) == expected
