"""The collectives section window by window equals it on the whole trace."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.roofline.collectives import collectives
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file

from helpers.tracegen import TraceBuilder
from windowed_check import check_every_trace, shared_traces


@pytest.fixture(scope="module")
def traces():
    return shared_traces()


def test_every_shared_trace_streams_to_the_same_result(traces):
    assert check_every_trace(collectives, "collectives", traces) > 10


def test_a_collective_sized_by_a_host_op_of_the_window_before(tmp_path):
    b = TraceBuilder()
    for n in range(5):
        b.step(n, n * 1000.0, 1000.0)
        b.launch(n * 1000.0 + 200.0, 5.0, name="gemm", k_ts=n * 1000.0 + 210.0, k_dur=30.0)
    # The host op (with its size) starts in step 1; its kernel is launched and runs in step 2,
    # so the window owning the kernel finds its size in its margin.
    op = b.op("record_param_comms", 1500.0, 600.0,
              args={"Collective name": "all_reduce", "In msg nelems": 1000,
                    "Out msg nelems": 1000, "Group size": 4, "dtype": "Float"})
    b.launch(2060.0, 5.0, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", k_ts=2070.0,
             k_dur=40.0, external_id=op["args"]["External id"])
    trace = load_file(str(b.write(tmp_path / "t.json")))
    steps = find_steps(trace)
    assert len(steps) >= 4 and steps.starts[2] == 2000.0
    whole = collectives(trace, steps)
    # 4000 bytes in 40 µs: 0.1 GB/s; bus bandwidth x 2(n-1)/n = 1.5.
    assert [(r.type, r.bytes, r.group_size, r.count) for r in whole.rows] == \
        [("all_reduce", 4000.0, 4, 1)]
    assert whole.rows[0].algbw_gb_s == pytest.approx(0.1)
    assert whole.rows[0].busbw_gb_s == pytest.approx(0.15)
    for per in (1, 2, 3):
        got = collectives.over(windows_of(trace, steps, per), steps)
        assert got.to_dict() == whole.to_dict()
