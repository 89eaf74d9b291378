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
