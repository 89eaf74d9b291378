"""The critical path agrees with the timeline it is drawn on (issue 25): GPU-bound steps whose
host waits for the device, runs far ahead, or whose streams wait on each other run on the GPU.

The two whole-step traces (tests/helpers/critical_path_traces.py) are built by a simulation that knows
each step's true path; the small ones below are worked out by hand."""

from __future__ import annotations

import pytest

from trainprof.analysis.critical_path import critical_path
from trainprof.analysis.overview.steps import find_steps
from trainprof.trace.load import load_file

from helpers.critical_path_traces import ddp_mi300, dualpipe_h800

DEVICE = ("gpu_compute", "gpu_communication", "copies")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = {}
    for make in (dualpipe_h800, ddp_mi300):
        sim = make()
        trace = load_file(sim.b.write(tmp_path_factory.mktemp(make.__name__) / "t.json"))
        out[make.__name__] = (sim, trace, critical_path(trace, find_steps(trace)))
    return out


def _busy_pct(trace, start_us, end_us):
    """The union of device events' time inside [start, end), in % (a reference computation)."""
    ev = trace.events
    spans = sorted((max(float(ev.ts[i]), start_us), min(float(ev.ts[i] + ev.dur[i]), end_us))
                   for i in range(len(ev)) if int(ev.device[i]) >= 0 and ev.dur[i] > 0
                   and trace.events.names[ev.name[i]] and int(ev.stream[i]) >= 0
                   and int(ev.kind[i]) in (7, 8, 9))
    busy, reach = 0.0, start_us
    for a, b in spans:
        if b > reach:
            busy += b - max(a, reach)
            reach = b
    return 100.0 * busy / (end_us - start_us)


@pytest.mark.parametrize("name", ["dualpipe_h800", "ddp_mi300"])
def test_gpu_bound_steps_run_on_the_gpu_as_simulated(simulated, name):
    sim, trace, result = simulated[name]
    for step in result.steps[1:]:  # the first step starts on the host: nothing queued yet
        length, device, host = sim.truth(step.step)
        assert step.step_us == pytest.approx(length, abs=2.0)
        share = 100.0 * sum(step.split_us[k] for k in DEVICE) / step.step_us
        assert _busy_pct(trace, step.start_us, step.start_us + step.step_us) >= 99.0
        # The simulated path is device work and device waits but for the host's wakes.
        assert 100.0 * device / length > 99.0
        assert share >= 100.0 * device / length - 0.5, step.split_us
        assert step.split_us["untraced_host"] <= 1.0
        assert step.split_us["launch_overhead"] <= host + 1.0


def test_the_dualpipe_host_waits_are_waits_not_its_annotations(simulated):
    _, _, result = simulated["dualpipe_h800"]
    step = result.steps[1]
    host = [p for p in step.pieces.longest(10_000) if p.lane.startswith("host")]
    assert not [p for p in host if p.name in ("1F1B", "dispatch(F)", "combine(B)")
                and p.end_us - p.start_us > 5.0]
    # Each all-to-all launched after a wait: the host's wake (2 µs) is a sync wait.
    assert sum(p.end_us - p.start_us for p in host if p.category == "sync_wait") > 0


def test_the_mi300_comm_stream_waits_are_waits(simulated):
    _, _, result = simulated["ddp_mi300"]
    for step in result.steps:
        comm = [p for p in step.pieces.longest(10_000) if p.lane == "GPU 0 stream 4"]
        assert comm and not [p for p in comm if p.category == "launch_overhead"]
        # The last all-reduce waits 4 µs (WAIT_LAG) for its bucket; the optimizer 4 µs for it.
        assert step.split_us["sync_wait"] == pytest.approx(8.0)
        assert step.split_us["launch_overhead"] <= 14.0  # the first step's first launch
    assert result.typical_launch_lag_us == pytest.approx(14.0)  # 8 µs call + 6 µs lag


def test_annotations_own_time_is_host_compute(builder, tmp_path):
    # A host-bound step: Python code inside an annotation between two ops (no call recorded).
    builder.step(1, 0, 300)
    builder.annotation("forward", 0, 290)
    builder.op("aten::linear", 10, 50)
    builder.op("aten::relu", 200, 50)
    trace = load_file(builder.write(tmp_path / "t.json"))
    step = critical_path(trace, find_steps(trace)).steps[0]
    # 10 + 140 + 40 µs of the annotation's own time, 100 of ops; 10 µs outside it.
    assert step.split_us["host_compute"] == pytest.approx(290)
    assert step.split_us["untraced_host"] == pytest.approx(10)


def test_a_host_spinning_until_a_kernel_ends_waited_for_it(builder, tmp_path):
    # The host launches a 500 µs kernel, then sits in no call (a spin on pinned memory) until
    # 1 µs after it ends, then launches the next: the path goes through the kernel.
    builder.step(1, 0, 700)
    builder.launch(10, 8, name="moe", k_ts=24, k_dur=500)  # ends at 524
    builder.op("aten::add", 525, 20)
    builder.launch(527, 8, name="next", k_ts=541, k_dur=100)
    trace = load_file(builder.write(tmp_path / "t.json"))
    step = critical_path(trace, find_steps(trace)).steps[0]
    names = {p.name for p in step.pieces.longest(100)}
    assert "moe" in names
    assert step.split_us["gpu_compute"] == pytest.approx(500)  # "next" ends before the step
    assert step.split_us["sync_wait"] == pytest.approx(1)  # the host's wake
    # Before the kernel: 10 µs untraced and the launch (8 + 6 µs); after the wake, the
    # untraced tail 545 -> 700 (aten::add's 20 µs and its launch are host work).
    assert step.split_us["untraced_host"] == pytest.approx(10 + 700 - 545)


def test_a_short_host_gap_is_no_wait(builder, tmp_path):
    builder.step(1, 0, 200)
    builder.op("aten::mm", 0, 30)
    builder.launch(5, 8, name="k", k_ts=20, k_dur=22)  # ends at 42
    builder.op("aten::add", 45, 150)  # 15 µs after mm: the host was busy, not waiting
    trace = load_file(builder.write(tmp_path / "t.json"))
    step = critical_path(trace, find_steps(trace)).steps[0]
    assert step.split_us["gpu_compute"] == 0
    assert step.split_us["untraced_host"] == pytest.approx(15 + 5)


def test_a_tie_between_a_launch_and_another_stream_goes_to_the_stream(builder, tmp_path):
    # k2 on stream 14 starts at 210, when k1 on stream 7 ends, and also exactly its launch
    # (200) plus the typical launch lag (10, from k1): recorded device work wins.
    builder.step(1, 0, 400)
    builder.launch(0, 5, name="k1", k_ts=10, k_dur=200)
    builder.stream = 14
    builder.launch(200, 5, name="k2", k_ts=210, k_dur=100)
    builder.stream = 7
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 206, 105)  # returns at 311
    trace = load_file(builder.write(tmp_path / "t.json"))
    step = critical_path(trace, find_steps(trace)).steps[0]
    lanes = [p.lane for p in step.pieces.longest(100) if p.name == "k1"]
    assert lanes == ["GPU 0 stream 7"]
    assert step.split_us["gpu_compute"] == pytest.approx(300)


@pytest.mark.parametrize("query", ["cudaEventQuery", "cudaStreamQuery", "hipEventQuery"])
def test_a_polling_loop_waited_for_the_kernel_it_polled(builder, tmp_path, query):
    # A 500 µs kernel ending at 524; the host polls every 50 µs from 40 (3 µs a call); the
    # poll at 540 sees it done and returns at 543; the host goes on at 545 (no wake limit:
    # the poll's answer is the evidence).
    builder.step(1, 0, 800)
    builder.launch(10, 8, name="moe", k_ts=24, k_dur=500)
    for at in range(40, 541, 50):
        builder.event("cuda_runtime", query, at, 3, {"correlation": 5000 + at})
    builder.op("aten::add", 545, 20)
    builder.launch(547, 8, name="next", k_ts=561, k_dur=100)
    trace = load_file(builder.write(tmp_path / "t.json"))
    step = critical_path(trace, find_steps(trace)).steps[0]
    assert "moe" in {p.name for p in step.pieces.longest(100)}
    assert step.split_us["gpu_compute"] == pytest.approx(500)
    # From the kernel's end to the last poll's return; the 2 µs after it are the host's own.
    assert step.split_us["sync_wait"] == pytest.approx(543 - 524)
    assert not [p for p in step.pieces.longest(100) if p.name == query]
