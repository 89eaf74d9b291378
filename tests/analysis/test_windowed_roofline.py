"""The roofline section window by window equals it on the whole trace."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.roofline.section import roofline
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file

from helpers.tracegen import TraceBuilder
from windowed_check import as_json, check_every_trace, differences, shared_traces


@pytest.fixture(scope="module")
def traces():
    return shared_traces()


def test_every_shared_trace_streams_to_the_same_result(traces):
    assert check_every_trace(roofline, "roofline", traces) > 10


def _mm(b: TraceBuilder, ts: float, k_ts: float, k_dur: float) -> None:
    """An aten::mm of 64x128 @ 128x32 in fp32 whose kernel runs at ``k_ts``."""
    op = b.op("aten::mm", ts, 20.0, args={"Input Dims": [[64, 128], [128, 32]],
                                          "Input type": ["float", "float"]})
    b.launch(ts + 5.0, 5.0, name="sgemm", k_ts=k_ts, k_dur=k_dur,
             external_id=op["args"]["External id"])


def test_ops_in_two_windows_margins_are_counted_once(tmp_path):
    b = TraceBuilder(metadata={"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]})
    for n in range(5):
        b.step(n, n * 1000.0, 1000.0)
        _mm(b, n * 1000.0 + 100.0, n * 1000.0 + 200.0, 50.0)
    # Launched at the very end of step 1, its kernel running late: step 1 then lasts until
    # 2330, and step 2's own mm (at 2100) starts before step 2 does, in step 1's window and
    # in the margin of step 2's.
    _mm(b, 1970.0, 2300.0, 30.0)
    trace = load_file(str(b.write(tmp_path / "t.json")))
    steps = find_steps(trace)
    assert len(steps) == 5 and steps.starts[2] == 2330.0
    whole = roofline(trace, steps)
    [row] = whole.shapes
    calls = len(steps) + 1
    # 2 x 64 x 32 x 128 FLOPs and (64x128 + 128x32 + 64x32) x 4 bytes per call.
    assert row.calls == calls and row.flops == pytest.approx(calls * 2 * 64 * 32 * 128)
    assert row.bytes == pytest.approx(calls * (64 * 128 + 128 * 32 + 64 * 32) * 4)
    assert row.time_us == pytest.approx(len(steps) * 50.0 + 30.0)
    for per in (1, 2, 3):
        got = roofline.over(windows_of(trace, steps, per), steps)
        assert not differences(as_json(got), as_json(whole))
