"""Bad input: one clear sentence and exit code 2 from the CLI, a TraceError from the API."""

from __future__ import annotations

import gzip
import subprocess
import sys

import pytest

import trainprof
from trainprof.errors import TraceError

from conftest import NCCL_TRACE


def write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def good_json() -> bytes:
    return gzip.decompress(NCCL_TRACE.read_bytes())


CASES = {
    "empty": ("empty.json", b"", "is empty"),
    "blank": ("blank.json", b"  \n", "is empty"),
    "truncated_json": ("cut.json", good_json()[:50_000], "not valid JSON"),
    "truncated_gzip": ("cut.json.gz", NCCL_TRACE.read_bytes()[:30_000], "not a readable gzip"),
    "corrupt_bytes": ("junk.json", b"\x00\x01\x02garbage", "not JSON"),
    "not_a_trace": ("config.json", b'{"lr": 0.1, "batch": 32}', "not a trace"),
    "wrong_shape": ("shape.json", b'{"traceEvents": {"a": 1}}', "not a Kineto trace"),
    "no_events": ("none.json", b'{"traceEvents": []}', "no trace events"),
    "huge_number": ("huge.json",
                    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1e999, "dur": 1}]}',
                    "number too large"),
    "string_ts": ("str.json",
                  b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "soon", "dur": 1}]}',
                  "numeric 'ts'"),
    "missing_ts": ("nots.json", b'{"traceEvents": [{"ph": "X", "name": "a", "dur": 1}]}',
                   "numeric 'ts'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_api_raises_trace_error(tmp_path, case):
    name, data, message = CASES[case]
    path = write(tmp_path, name, data)
    with pytest.raises(TraceError, match=message):
        trainprof.analyze(path)


@pytest.mark.parametrize("case", ["truncated_gzip", "not_a_trace", "huge_number", "empty"])
def test_cli_says_one_sentence_and_exits_2(tmp_path, case):
    name, data, message = CASES[case]
    path = write(tmp_path, name, data)
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr
    assert proc.stdout == ""


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        trainprof.analyze(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(TraceError, match="holds no trace files"):
        trainprof.analyze(tmp_path / "empty")
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(tmp_path / "empty"),
                           "--format", "json"], capture_output=True, text=True)
    assert proc.returncode == 2 and "holds no trace files" in proc.stderr


def test_folder_skips_json_that_is_not_a_trace(tmp_path):
    (tmp_path / "rank0.json.gz").write_bytes(NCCL_TRACE.read_bytes())
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    with pytest.warns(UserWarning, match="config.json"):
        analysis = trainprof.analyze(tmp_path)
    assert len(analysis.ranks) == 1


def test_corrupt_rank_in_a_folder_is_an_error_not_a_missing_rank(tmp_path):
    (tmp_path / "rank0.json.gz").write_bytes(NCCL_TRACE.read_bytes())
    (tmp_path / "rank1.json.gz").write_bytes(NCCL_TRACE.read_bytes()[:1000])
    with pytest.raises(TraceError, match="rank1.json.gz"):
        trainprof.analyze(tmp_path)


ODD_BUT_READABLE = {
    # A kernel with no host op anywhere in the trace (a sampled device-only trace).
    "device_only": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1,
                     "dur": 5, "args": {"correlation": 10**25, "device": 0, "stream": 7,
                                        "grid": [1, 1, 1], "block": [1e40, 1, 1]}}],
    # Ids, pids and tids that are lists or objects, and a device number beyond int16.
    "odd_ids": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": [1], "tid": {"a": 1},
                 "ts": 1, "dur": 9, "args": {"External id": [3]}},
                {"ph": "X", "cat": ["kernel"], "name": "k", "pid": 0, "tid": 7, "ts": 2,
                 "dur": 5, "args": {"correlation": {"x": 1}, "device": 1e30, "stream": 10**30}},
                {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 8,
                 "dur": 1, "args": {"device": 70000, "stream": "stream 7"}}],
    # A step number beyond 64 bits is no step; times centuries apart allocate nothing per µs.
    "huge_numbers": [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#" + "9" * 30, "ts": 1,
                      "dur": 100, "pid": 1, "tid": 1},
                     {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1e300, "dur": 5,
                      "pid": 1, "tid": 1},
                     {"ph": "i", "s": "t", "name": "[memory]", "ts": 1e250, "pid": 1, "tid": 1,
                      "args": {"Device Type": 0, "Bytes": 100, "Total Allocated": 100,
                               "Total Reserved": 200, "Addr": 1}},
                     {"ph": "X", "cat": "kernel", "name": "k", "ts": 50, "dur": 1e200, "pid": 0,
                      "tid": 7, "args": {"device": 0, "stream": 7}}],
}


@pytest.mark.parametrize("case", sorted(ODD_BUT_READABLE))
def test_odd_values_load_and_analyse(tmp_path, case):
    """Values of the wrong type or out of range in fields we only use for joins are not an
    error: the trace loads and every section runs (JSON and text)."""
    import io
    import json

    from rich.console import Console

    from trainprof.report.json import to_json_bytes
    from trainprof.report.text import print_analysis

    path = write(tmp_path, f"{case}.json", json.dumps({"traceEvents": ODD_BUT_READABLE[case]})
                 .encode())
    analysis = trainprof.analyze(path)
    assert json.loads(to_json_bytes(analysis))["ranks"][0]["kernels"]["calls"] >= 1
    print_analysis(analysis, Console(file=io.StringIO(), width=100))


def test_a_wrong_type_in_a_big_trace_is_reported_at_once(tmp_path):
    """An event of the wrong shape in a trace decoded piece by piece (over CHUNK_BYTES) is an
    error about that event: the decoder does not take it for a cut inside an event and retry
    on ever longer pieces."""
    import json

    from trainprof.trace.stream import CHUNK_BYTES

    event = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1,
             "dur": 1, "args": {"External id": 1}}
    events = [{**event, "args": 1.5}] + [event] * (CHUNK_BYTES // 80)
    path = write(tmp_path, "big.json", json.dumps({"traceEvents": events}).encode())
    assert path.stat().st_size > CHUNK_BYTES
    with pytest.raises(TraceError, match="an event's 'args' is wrong"):
        trainprof.load(path)
