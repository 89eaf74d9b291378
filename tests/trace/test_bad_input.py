"""Bad input: one clear sentence and exit code 2 from the CLI, a TraceError from the API."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

import trainprof
from trainprof.errors import TraceError

from helpers.paths import NCCL_TRACE


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
                  r"an event's 'ts' is wrong \(expected a number, got text\)"),
    "huge_dur": ("long.json",
                 b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1e308}]}',
                 r"an event lasting 1e\+308 µs \(over 12 days\): not a recorded duration"),
    "bool_ts": ("bool.json",
                b'{"traceEvents": [{"ph": "X", "name": "a", "ts": true, "dur": 1}]}',
                r"an event's 'ts' is wrong \(expected a number, got true or false\)"),
    "number": ("n.json", b"42\n", "JSON but not a trace: it holds a number"),
    "null": ("null.json", b"null", "JSON but not a trace: it holds null"),
    "text": ("s.json", b'"text"', "JSON but not a trace: it holds text"),
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


@pytest.mark.parametrize("stray", [b"42", b"null", b'"notes"', b"not json at all"])
def test_one_rule_for_files_that_are_not_traces_in_a_folder(tmp_path, stray):
    """A config and a stray scalar or non-JSON file are both skipped with a warning, through
    the API and the parallel path alike; a truncated trace still stops the folder."""
    (tmp_path / "rank0.json.gz").write_bytes(NCCL_TRACE.read_bytes())
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    (tmp_path / "stray.json").write_bytes(stray)
    with pytest.warns(UserWarning) as caught:
        analysis = trainprof.analyze(tmp_path)
    warned = sorted(str(w.message) for w in caught if "skipped" in str(w.message))
    assert len(analysis.ranks) == 1 and len(warned) == 2
    assert "config.json" in warned[0] and "stray.json" in warned[1]
    assert all(w.endswith("; skipped.") for w in warned)
    assert [t.path.name for t in trainprof.load(tmp_path)] == ["rank0.json.gz"]


def test_a_folder_of_only_non_traces_says_so_about_the_folder(tmp_path):
    """Not "config.json is JSON but not a trace" as if it were meant to be one: the folder holds
    no traces, the config is skipped with a warning; named on its own, the file's own error."""
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"trainprof: {tmp_path} holds no Kineto traces (the files skipped above are " \
                   "not traces)."
    assert "config.json is JSON but not a trace" in proc.stderr and "skipped" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze",
                           str(tmp_path / "config.json")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("is JSON but not a trace: it has no 'traceEvents' list.")


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
                     {"ph": "X", "cat": "kernel", "name": "k", "ts": 50, "dur": 1e11, "pid": 0,
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
    from trainprof.report.terminal.report import print_analysis

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
    events = [{**event, "ts": "soon"}] + [event] * (CHUNK_BYTES // 80)
    path = write(tmp_path, "big.json", json.dumps({"traceEvents": events}).encode())
    assert path.stat().st_size > CHUNK_BYTES
    with pytest.raises(TraceError, match="an event's 'ts' is wrong"):
        trainprof.load(path)


def test_odd_events_are_read_as_a_viewer_would_and_said_once(tmp_path):
    """An event whose args are a list or text loses its args, a bare number in the event list
    is skipped, a negative duration is read as 0, a null name shows as "(unnamed)": the trace
    is read and each repair is counted in one note."""
    events = [
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10, "args": [1, 2]}',
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 20, "dur": 5, "args": "x"}',
        b"42",
        b'"stray"',
        b'{"ph": "X", "cat": "cpu_op", "name": null, "ts": 30, "dur": -3}',
        b'{"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 40, "dur": 2}',
    ]
    path = write(tmp_path, "odd.json", b'{"traceEvents": [' + b",".join(events) + b"]}")
    from trainprof.trace.load import load_file

    trace = load_file(path)
    names = [trace.events.names[i] for i in trace.events.name]
    assert names == ["aten::mm", "aten::add", "(unnamed)", "aten::relu"]
    assert trace.events.dur.tolist() == [10.0, 5.0, 0.0, 2.0]
    assert trace.notes == [
        "2 events had 'args' that are not an object; they were read without their args.",
        "2 entries of 'traceEvents' are not an event (a number, text or a list) and skipped.",
        "1 event had a negative duration (a recording glitch), read as 0.",
    ]


def test_a_repair_in_a_big_trace_keeps_every_other_event(tmp_path):
    """One odd event in the middle of a real multi-piece trace: every other event is kept."""
    import json

    from trainprof.trace.load import load_file

    doc = json.loads(good_json())
    good = load_file(write(tmp_path, "good.json", json.dumps(doc).encode()))
    middle = len(doc["traceEvents"]) // 2
    doc["traceEvents"][middle]["args"] = ["not", "an", "object"]
    odd = load_file(write(tmp_path, "odd.json", json.dumps(doc).encode()))
    assert len(odd.events.ts) == len(good.events.ts)
    assert odd.notes[0].startswith("1 event had 'args' that are not an object")


@pytest.mark.parametrize("ids", [[[1], [2], [1]], [1.5, 1.7, 1.5], [True, 2, True]],
                         ids=["lists", "floats", "bools"])
def test_ids_that_are_not_integers_stay_distinct_and_equal(tmp_path, ids):
    """numpy would cut 1.5 and 1.7 both to 1 (a false join) and make lists a second axis."""
    from trainprof.trace.load import load_file

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i,
               "dur": 5, "args": {"External id": v}} for i, v in enumerate(ids)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ext = load_file(path, workers=1).events.external_id
    assert ext.ndim == 1 and len(ext) == 3
    assert ext[0] == ext[2] and ext[0] != ext[1]
