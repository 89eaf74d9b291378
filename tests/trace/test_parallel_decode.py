"""One trace decoded by several worker processes equals the serial read, to the bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

import trainprof
from trainprof import structs
from trainprof.trace import load, parallel_decode, stream
from trainprof.trace.load import load_file

from helpers.ctrl_c import ctrl_c_as_a_worker_starts
from helpers.paths import (
    ALEXNET,
    BERT,
    BIG_TRACE,
    COMPILED,
    GPU_METRICS,
    NCCL_TRACE,
    NS_TRACE,
    PARAM,
    RESNET_W0,
    RESNET_W4,
    TIMESFORMER,
    TRACE_FILTER,
)

SHARED_TRACES = [RESNET_W0, RESNET_W4, GPU_METRICS, NS_TRACE, NCCL_TRACE,
                 TRACE_FILTER / "sampled_rank-0.json.gz", BIG_TRACE, ALEXNET, TIMESFORMER, BERT,
                 PARAM, COMPILED]


@pytest.fixture
def small_pieces(monkeypatch):
    """Pieces of 64 KiB in segments of 256 KiB: even small traces give many segments."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 16 * 1024)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 256 * 1024)


def assert_identical(serial, parallel):
    """Every column, table, thread, time origin and metadata key equal, dtypes included."""
    for part in ("events", "memory", "flows"):
        a, b = getattr(serial, part), getattr(parallel, part)
        for f in structs.fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if isinstance(x, np.ndarray):
                assert x.dtype == y.dtype, (part, f.name)
                assert x.tobytes() == y.tobytes(), (part, f.name)
            else:
                assert x == y, (part, f.name)
    assert serial.t0_us == parallel.t0_us
    assert serial.threads == parallel.threads
    assert serial.metadata == parallel.metadata
    assert serial.notes == parallel.notes  # e.g. events repaired or skipped, said once


@pytest.fixture
def parallel_reads(monkeypatch):
    """What each parallel read returned (None: it fell back to the serial read)."""
    seen = []

    def spy(*args, **kwargs):
        seen.append(parallel_decode.decode_parallel(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(load, "decode_parallel", spy)
    return seen


@pytest.mark.parametrize("trace", SHARED_TRACES, ids=lambda p: p.name[:40])
def test_shared_trace_parallel_equals_serial(trace, small_pieces, parallel_reads):
    serial = load_file(trace, workers=1)
    parallel = load_file(trace, workers=2)
    assert len(parallel_reads) == 1 and parallel_reads[0] is not None, "read serially"
    assert_identical(serial, parallel)


def test_analysis_equal_on_the_reference_trace(small_pieces, monkeypatch):
    serial = trainprof.analyze(BIG_TRACE).to_dict()
    monkeypatch.setenv(parallel_decode.WORKERS_ENV, "2")
    assert trainprof.analyze(BIG_TRACE).to_dict() == serial


def tricky_trace(builder, note: str = "plain") -> dict:
    """Names in two categories, threads first seen in memory and flow events, string and
    number tids, shapes, stacks, launch details, spread over many segments."""
    for step in range(40):
        t = step * 1000.0
        builder.step(step, t, 1000)
        builder.memory(t + 1, 512, 4096 + step, tid=f"{900 + step % 7}")
        op = builder.op(f"aten::mm_{step % 13}", t + 5, 100, tid=str(200 + step % 3),
                        args={"Input Dims": [[step % 4, 8]], "Call stack": f"f{step % 5}.py",
                              "note": note * 40})
        builder.event("user_annotation", f"aten::mm_{step % 13}", t + 6, 50)
        for k in range(30):
            builder.launch(t + 10 + k, 2, name=f"kernel_{(step * 30 + k) % 97}",
                           args={"grid": [k, 1, 1], "block": [128, 1, 1]},
                           external_id=op["args"]["External id"], flow=k % 5 == 0)
    return builder.document()


def test_synthetic_trace_parallel_equals_serial(tmp_path, builder, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 16 * 1024)
    path = tmp_path / "t.json.gz"
    doc = tricky_trace(builder)
    builder.write(path)
    decoded = parallel_decode.decode_parallel(path, 2)
    assert decoded is not None
    serial, parallel = load_file(path, workers=1), load_file(path, workers=2)
    assert_identical(serial, parallel)
    # ... and both hold what was written (an independent count).
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(parallel.events) == len(complete)
    assert len(parallel.memory.ts) == 40 and len(parallel.flows.ts) == 40 * 6 * 2
    assert sorted(set(parallel.events.names)) == sorted({e["name"] for e in complete})


def test_a_cut_inside_a_string_reads_serially(tmp_path, builder, monkeypatch):
    """Boundaries written inside strings: the workers notice, and the serial read is used."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 16 * 1024)
    path = tmp_path / "t.json"
    tricky_trace(builder, note='}, {"ph": "X"')
    builder.write(path)
    assert parallel_decode.decode_parallel(path, 2) is None
    assert_identical(load_file(path, workers=1), load_file(path, workers=2))


def test_string_ids_read_serially(tmp_path, builder, monkeypatch):
    """Ids that are not integers get codes numbered across the file: read serially."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 16 * 1024)
    tricky_trace(builder)
    for ev in builder.events[::50]:
        if "correlation" in ev.get("args", {}):
            ev["args"]["correlation"] = f"c{ev['args']['correlation']}"
    path = tmp_path / "t.json"
    builder.write(path)
    assert parallel_decode.decode_parallel(path, 2) is None
    assert_identical(load_file(path, workers=1), load_file(path, workers=2))


def test_corrupt_middle_same_error_as_serial(tmp_path, builder, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 16 * 1024)
    text = json.dumps(tricky_trace(builder), indent=1)
    start = text.index('"ts": ', len(text) // 2) + len('"ts": ')
    end = text.index(",", start)
    path = tmp_path / "bad.json"
    path.write_text(text[:start] + '"soon"' + text[end:])
    with pytest.raises(trainprof.TraceError) as serial:
        load_file(path, workers=1)
    with pytest.raises(trainprof.TraceError) as parallel:
        load_file(path, workers=2)
    assert str(parallel.value) == str(serial.value)
    assert "an event's 'ts' is wrong (expected a number, got text)" in str(serial.value)


def test_workers_chosen_by_size_and_cores(tmp_path, monkeypatch):
    small = tmp_path / "small.json"
    small.write_text('{"traceEvents": []}')
    monkeypatch.delenv(parallel_decode.WORKERS_ENV, raising=False)
    assert parallel_decode.decode_workers(small) == 1
    monkeypatch.setattr(parallel_decode, "PARALLEL_MIN_BYTES", 10)
    monkeypatch.setattr(parallel_decode, "usable_cores", lambda: 6)
    assert parallel_decode.decode_workers(small) == 6
    monkeypatch.setenv(parallel_decode.WORKERS_ENV, "1")
    assert parallel_decode.decode_workers(small) == 1


def test_a_dead_worker_means_a_serial_read(tmp_path, builder, monkeypatch):
    """Workers that exit at once (killed, out of memory): nothing lost, the file read serially."""
    import subprocess
    import sys

    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 16 * 1024)
    monkeypatch.setattr(parallel_decode, "_start_worker", lambda shared: subprocess.Popen(
        [sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    path = tmp_path / "t.json"
    tricky_trace(builder)
    builder.write(path)
    assert parallel_decode.decode_parallel(path, 2) is None
    assert_identical(load_file(path, workers=1), load_file(path, workers=2))


def test_odd_events_read_as_the_serial_read_does(tmp_path, builder, monkeypatch):
    """A negative duration and an event whose args are a list, mid-file: whatever the serial
    read makes of them (an error, or a repair and a note), the parallel read makes the same."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 16 * 1024)
    tricky_trace(builder)
    builder.events[len(builder.events) // 2]["dur"] = -3
    builder.events[len(builder.events) * 2 // 3]["args"] = [1, 2]
    path = tmp_path / "odd.json"
    builder.write(path)

    def outcome(workers):
        try:
            return load_file(path, workers=workers)
        except trainprof.TraceError as exc:
            return str(exc)

    serial, parallel = outcome(1), outcome(2)
    if isinstance(serial, str):
        assert parallel == serial
    else:
        assert_identical(serial, parallel)


#: Ctrl-C (SIGINT to the process group) the moment the first decode worker has been started,
#: before this process has recorded it and before the worker's Python has started.
CTRL_C_AT_START = ctrl_c_as_a_worker_starts(
    "trainprof.trace.parallel_decode",
    "workers.SEGMENT_BYTES = 256 * 1024; workers.decode_parallel(Path(sys.argv[1]), workers=2)")


def test_ctrl_c_as_a_decode_worker_starts_stops_every_worker():
    """Both workers are recorded before the Ctrl-C is raised (it is held while they start), so
    both are stopped and reaped, and each ignores the Ctrl-C: nothing left, no traceback."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", CTRL_C_AT_START, str(NS_TRACE)],
                          capture_output=True, text=True, env=env, timeout=60,
                          start_new_session=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
