"""The spilled trace: every window equals the same time slice of the trace read whole."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from trainprof import structs
from trainprof.errors import TraceError
from trainprof.trace import parallel_decode, stream
from trainprof.trace.kernel_context import LAUNCH_CONTEXT_KEY
from trainprof.trace.load import load_file
from trainprof.trace.model import Events, Flows, MemoryEvents
from trainprof.trace.parallel_decode import json_size
from trainprof.trace.spill import _Spiller, spill_file
from trainprof.trace.window import time_slice

from helpers.paths import SHARED_TRACE_FILES

_TABLES = ("names", "shapes", "stacks", "details", "op_arg_texts")


def assert_same_window(got, want) -> None:
    """Columns equal to the bit (NaN equal to NaN); tables compared through the columns."""
    for cls, a, b in ((Events, got.events, want.events), (MemoryEvents, got.memory, want.memory),
                      (Flows, got.flows, want.flows)):
        for f in structs.fields(cls):
            if f.name in _TABLES:
                continue
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name in ("detail", "shape", "stack", "op_args"):
                table = {"detail": "details", "shape": "shapes", "stack": "stacks",
                         "op_args": "op_arg_texts"}[f.name]
                x = [None if i < 0 else getattr(a, table)[i] for i in x.tolist()]
                y = [None if i < 0 else getattr(b, table)[i] for i in y.tolist()]
                assert x == y, f"{cls.__name__}.{f.name}"
            elif f.name == "name":
                assert [a.names[i] for i in x.tolist()] == [b.names[i] for i in y.tolist()]
            else:
                assert x.dtype == y.dtype, f"{cls.__name__}.{f.name}"
                assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), \
                    f"{cls.__name__}.{f.name}"
    assert got.t0_us == want.t0_us and got.threads == want.threads
    assert got.metadata == want.metadata and got.notes == want.notes
    assert np.array_equal(got.__dict__[LAUNCH_CONTEXT_KEY],
                          want.__dict__.get(LAUNCH_CONTEXT_KEY, np.empty(0, np.int64)))


def _cuts(trace) -> list[tuple[float, float]]:
    """The whole trace, and three windows whose edges fall on event times."""
    ts = trace.events.ts
    q = [float(ts[int(len(ts) * f)]) for f in (0.2, 0.5, 0.8)]
    return [(-math.inf, math.inf), (-math.inf, q[0]), (q[0], q[1]), (q[1], math.inf),
            (q[0] + 0.5, q[2] - 0.25)]


@pytest.mark.parametrize("path", SHARED_TRACE_FILES, ids=lambda p: p.name)
def test_windows_equal_slices_of_the_whole_trace(path, tmp_path, monkeypatch):
    whole = load_file(path, workers=1)
    # Small pieces, so that every window draws on several of them.
    monkeypatch.setattr(stream, "CHUNK_BYTES", max(json_size(path) // 8, 4096))
    with spill_file(path, tmp_path, piece_events=1) as spilled:
        assert len(spilled.pieces) >= 3
        assert spilled.devices == whole.devices
        for start, end in _cuts(whole):
            assert_same_window(spilled.window(start, end), time_slice(whole, start, end))
        assert spilled.event_count() == len(whole.events)
    assert not os.listdir(tmp_path)  # the spill is gone


def test_spill_read_by_decode_workers_equals_the_serial_one(tmp_path, monkeypatch):
    path = next(p for p in SHARED_TRACE_FILES if p.name == "df_index_resolver.json.gz")
    whole = load_file(path, workers=1)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 256 * 1024)
    monkeypatch.setattr(parallel_decode, "SEGMENT_BYTES", 2 * 2**20)
    spilled = _Spiller(path, tmp_path, piece_events=30_000).run_parallel(workers=2)
    assert spilled is not None  # not handed back to the serial read
    with spilled:
        assert len(spilled.pieces) >= 3
        for start, end in _cuts(whole):
            assert_same_window(spilled.window(start, end), time_slice(whole, start, end))


def test_spill_is_removed_when_the_file_is_bad(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}, {"ph": "X", "ts": "x"}]}')
    spill = tmp_path / "spill"
    spill.mkdir()
    with pytest.raises(TraceError):
        spill_file(bad, spill)
    assert not os.listdir(spill)


def test_launch_context_is_decided_over_the_whole_file(builder, tmp_path, monkeypatch):
    """Kernels of unknown names launched inside a collective are communication, even when the
    launch and the kernel are read in different pieces (device events come last, as Kineto
    writes them)."""
    for i in range(40):
        base = i * 1000.0
        builder.op("nccl:all_reduce", base, 100)
        builder.launch(base + 10, 5, name="mystery_kernel_a", k_ts=base + 500)  # inside
        builder.launch(base + 200, 5, name="mystery_kernel_b", k_ts=base + 600)  # outside
    builder.events.sort(key=lambda e: e["cat"] == "kernel")
    path = builder.write(tmp_path / "trace.json")
    whole = load_file(path, workers=1)
    flagged = whole.__dict__[LAUNCH_CONTEXT_KEY]
    assert {whole.events.names[n] for n in whole.events.name[flagged]} == {"mystery_kernel_a"}
    assert len(flagged) == 40
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)
    spill = tmp_path / "spill"
    spill.mkdir()
    with spill_file(path, spill, piece_events=1) as spilled:
        assert len(spilled.pieces) >= 3
        for start, end in _cuts(whole):
            assert_same_window(spilled.window(start, end), time_slice(whole, start, end))
