"""The modules section window by window equals it on the whole trace."""

from __future__ import annotations

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.sections.modules import module_tree
from trainprof.analysis.streaming.windows import windows_of
from trainprof.trace.load import load_file

from helpers.tracegen import TraceBuilder
from windowed_check import as_json, check_every_trace, differences, shared_traces


@pytest.fixture(scope="module")
def traces():
    return shared_traces()


def test_every_shared_trace_streams_to_the_same_result(traces):
    assert check_every_trace(module_tree, "modules", traces) > 10


def test_findings_see_the_same_op_time_per_module(traces):
    for _, trace, steps in traces:
        whole = module_tree(trace, steps)
        for per in (1, 3):
            got = module_tree.over(windows_of(trace, steps, per), steps)
            assert got.op_time.keys() == whole.op_time.keys()
            for clock, ops in whole.op_time.items():
                assert list(got.op_time[clock]) == list(ops)
                for name, rows in ops.items():
                    assert list(got.op_time[clock][name]) == list(rows)
                    assert got.op_time[clock][name] == pytest.approx(rows, rel=1e-9)


STEPS = 5


def _flow(b: TraceBuilder, flow_id: int, fwd: tuple[int, float], bwd: tuple[int, float]) -> None:
    for ph, (tid, ts) in (("s", fwd), ("f", bwd)):
        b.events.append({"ph": ph, "id": flow_id, "pid": b.pid, "tid": tid, "ts": b.base + ts,
                         "cat": "fwdbwd", "name": "fwdbwd", **({"bp": "e"} if ph == "f" else {})})


def _steps_with_late_backward(tmp_path):
    """STEPS steps of Outer_0 > Inner_0 > mm (kernel 80 µs, backward kernel 150 µs on thread
    200); in step 1, a Late_0 module's mm (kernel 20 µs) whose backward runs in step 2
    (kernel 30 µs), joined by a fwdbwd flow across the step boundary."""
    b = TraceBuilder()
    for n in range(STEPS):
        t = n * 1000.0
        b.step(n, t, 1000.0)
        b.event("python_function", "nn.Module: Outer_0", t + 10, 390)
        b.event("python_function", "nn.Module: Inner_0", t + 50, 250)
        mm = b.op("aten::mm", t + 60, 100)
        b.launch(t + 70, 10, name="gemm", k_ts=t + 120, k_dur=80,
                 external_id=mm["args"]["External id"])
        back = b.op("MmBackward0", t + 500, 200, tid=200)
        b.launch(t + 510, 10, name="gemm_bwd", k_ts=t + 520, k_dur=150, tid=200,
                 external_id=back["args"]["External id"])
        _flow(b, n + 1, (100, t + 60), (200, t + 500))
    b.event("python_function", "nn.Module: Late_0", 1900, 50)
    mm = b.op("aten::mm", 1910, 20)
    b.launch(1915, 3, name="gemm", k_ts=1920, k_dur=20, external_id=mm["args"]["External id"])
    back = b.op("MmBackward0", 2750, 40, tid=200)
    b.launch(2755, 3, name="gemm_bwd", k_ts=2760, k_dur=30, tid=200,
             external_id=back["args"]["External id"])
    _flow(b, 99, (100, 1910), (200, 2750))
    return load_file(str(b.write(tmp_path / "t.json")))


def test_backward_in_the_next_window_goes_to_its_forward_module(tmp_path):
    trace = _steps_with_late_backward(tmp_path)
    steps = find_steps(trace)
    assert len(steps) == STEPS and list(steps.starts[:3]) == [0.0, 1000.0, 2000.0]
    whole = module_tree(trace, steps)
    by = {r.path: r for r in whole.rows}
    assert list(by) == ["Outer_0", "Outer_0/Inner_0", "Late_0"]
    assert by["Outer_0/Inner_0"].calls == STEPS
    assert by["Outer_0/Inner_0"].backward_device_self_us == pytest.approx(STEPS * 150.0)
    late = by["Late_0"]
    assert (late.calls, late.device_total_us, late.backward_calls) == (1, 20.0, 1)
    assert late.backward_device_self_us == pytest.approx(30.0)
    for per in (1, 2, 3):
        got = module_tree.over(windows_of(trace, steps, per), steps)
        assert not differences(as_json(got), as_json(whole)), per

