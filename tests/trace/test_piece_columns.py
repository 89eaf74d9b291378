"""Columns of scanned pieces (trace/piece_columns.py): the cases its lookup tables decide.

Each trace is read with the compiled scanner and with msgspec alone
(``TRAINPROF_PURE_PYTHON=1``); the columns and tables must be identical, and the scanner's
counts say whether the fast path took the piece.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainprof.structs import field_names
from trainprof.trace import scan
from trainprof.trace.load import load_file
from trainprof.trace.model import Kind

pytestmark = pytest.mark.skipif(not scan.available(), reason="the scanner is not built")


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, dict[str, int]]:
    """(msgspec's trace, the scanner's trace, the scanner's counts)."""
    traces = []
    for pure in ("1", "0"):
        monkeypatch.setenv("TRAINPROF_PURE_PYTHON", pure)
        scan.SCAN_STATS.clear()
        traces.append(load_file(path, workers=1))
    return traces[0], traces[1], dict(scan.SCAN_STATS)


def _assert_same_events(a: Any, b: Any) -> None:
    for name in ("kind", "name", "ts", "dur", "tid", "device", "stream", "correlation",
                 "external_id", "blocks_per_sm", "occupancy", "nbytes", "flags", "flops",
                 "shape", "stack", "detail", "op_args"):
        x, y = getattr(a.events, name), getattr(b.events, name)
        assert x.dtype == y.dtype, name
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
    assert a.events.names == b.events.names
    assert a.events.details == b.events.details
    assert a.threads == b.threads
    assert a.t0_us == b.t0_us
    assert a.notes == b.notes
    for table in ("memory", "flows"):
        for name in field_names(getattr(a, table)):
            x = getattr(getattr(a, table), name)
            if isinstance(x, np.ndarray):
                y = getattr(getattr(b, table), name)
                assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), name


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _kernel(ts: float, grid: list[int], **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 2,
            "args": {"device": 0, "stream": 7, "correlation": int(ts), "grid": grid,
                     "block": [128, 1, 1], **args}}


def test_a_list_in_an_event_not_read_keeps_the_fast_path(tmp_path, monkeypatch):
    """A metadata event whose pid and name are lists is in the piece's tables of pairs but is
    not read: the piece is still read by the scanner's path, as msgspec's path reads it."""
    events = [{"ph": "M", "name": ["odd"], "pid": [1], "tid": 0, "args": {"name": "x"}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 5,
               "dur": 3, "args": {"External id": 4}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": "2", "ts": 9,
               "dur": 1}]
    pure, scanned, stats = _read_both(_write(tmp_path, events), monkeypatch)
    _assert_same_events(pure, scanned)
    assert stats.get("accepted", 0) >= 1 and stats.get("redecoded", 0) == 0
    assert scanned.events.names == ["aten::mm", "aten::add"]


def test_a_list_as_a_complete_events_name_is_left_to_msgspec(tmp_path, monkeypatch):
    events = [{"ph": "X", "cat": "cpu_op", "name": ["odd"], "pid": 1, "tid": 2, "ts": 5,
               "dur": 3}]
    pure, scanned, stats = _read_both(_write(tmp_path, events), monkeypatch)
    _assert_same_events(pure, scanned)
    assert stats.get("redecoded", 0) == 1


def test_a_piece_of_every_phase_reads_the_same(tmp_path, monkeypatch):
    """Complete, memory, other instant, flow start and end, and metadata events in one piece;
    a device event without args.device takes the pid's number, one with a null stream the
    tid's."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "gpu"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
         "ts": 10, "dur": 4, "args": {"correlation": 11}},
        {"ph": "s", "cat": "ac2g", "name": "launch", "id": 11, "pid": 1, "tid": 2, "ts": 10},
        {"ph": "f", "cat": "ac2g", "name": "launch", "id": 11, "pid": "gpu 3", "tid": 7,
         "ts": 20, "bp": "e"},
        {"ph": "i", "cat": "x", "name": "[memory]", "pid": 1, "tid": 2, "ts": 12,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Addr": 99}},
        {"ph": "i", "cat": "x", "name": "marker", "pid": 1, "tid": 2, "ts": 13},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": "gpu 3", "tid": 7, "ts": 20,
         "dur": 5, "args": {"correlation": 11, "stream": None, "grid": [1, 1, 1],
                            "block": [32, 1, 1]}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8, "ts": 30,
         "dur": -1, "args": {"device": 0, "stream": 8, "bytes": 64}},
    ]
    pure, scanned, stats = _read_both(_write(tmp_path, events), monkeypatch)
    _assert_same_events(pure, scanned)
    assert stats.get("accepted", 0) >= 1 and stats.get("redecoded", 0) == 0
    ev = scanned.events
    (kernel,) = np.flatnonzero(ev.kind == Kind.KERNEL).tolist()
    assert ev.device[kernel] == 3 and ev.stream[kernel] == 7  # "gpu 3", the tid
    assert len(scanned.memory.ts) == 1 and len(scanned.flows.id) == 2


def test_kernels_with_one_launch_configuration_share_its_details(tmp_path, monkeypatch):
    events = [_kernel(10 * i, [i % 2 + 1, 1, 1]) for i in range(6)]
    pure, scanned, _ = _read_both(_write(tmp_path, events), monkeypatch)
    _assert_same_events(pure, scanned)
    details = [scanned.events.details[d] for d in scanned.events.detail.tolist()]
    assert [d["grid"] for d in details] == [[i % 2 + 1, 1, 1] for i in range(6)]
    assert details[0] is details[2] and details[1] is details[3]
    assert details[0] is not details[1]


@pytest.mark.parametrize("values", [
    [np.nan] * 40,  # a float column no event fills: not reordered
    [-1] * 40,
    [-1] * 39 + [5],  # one value apart, where a sample of the column does not look
    [0.0] * 20 + [-0.0] * 20,  # equal, but not the same bits
    [3, 1, 2] * 13 + [7],
])
def test_columns_are_put_in_time_order_bit_for_bit(values):
    from trainprof.trace.columns import _sorted_by_ts

    column = np.array(values)
    ts = np.arange(len(values), dtype=np.float64)[::-1].copy()  # every event out of order
    parts = [{"ts": ts[:25], "v": column[:25]}, {"ts": ts[25:], "v": column[25:]}]
    out = _sorted_by_ts(parts, ts, ("ts", "v"), {})
    expected = column[np.argsort(ts, kind="stable")]
    assert out["v"].dtype == expected.dtype
    assert out["v"].tobytes() == expected.tobytes()
    assert out["ts"].tobytes() == np.sort(ts).tobytes()
