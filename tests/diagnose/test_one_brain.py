"""One run, one verdict: the same figures through every adapter (a recorded trace, the step
timer's live window, the quick checklist, a memory snapshot) give the same finding, severity and
saving, because each asks diagnose/verdicts.py."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.analysis.overview.step_spread import step_spread
from trainprof.bench.health import judge
from trainprof.capture.live_figures import LiveFigures, live_verdicts
from trainprof.capture.step_times import Window
from trainprof.capture.steps import TimerView
from trainprof.diagnose import verdicts

from helpers.tracegen import TraceBuilder

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
STEPS = 10


def recorded(tmp_path, data_us: float, optimizer_us: float, step_us: list[float]):
    """A CPU trace whose steps wait ``data_us`` for a batch, then run forward, backward and an
    AdamW step of ``optimizer_us`` made of 150 per-tensor ops (a for-loop step); the rest of
    each step (``step_us``) is forward and backward in halves."""
    b = TraceBuilder()
    t = 0.0
    for n, step in enumerate(step_us):
        b.step(n, t, step)
        b.op(LOADER, t, data_us)
        compute = step - data_us - optimizer_us
        b.op("aten::linear", t + data_us, compute / 2)
        b.op("autograd::engine::evaluate_function: AddmmBackward0", t + data_us + compute / 2,
             compute / 2)
        start = t + step - optimizer_us
        b.annotation("Optimizer.step#AdamW.step", start, optimizer_us)
        for i in range(150):
            b.op("aten::add_", start + i * optimizer_us / 150, optimizer_us / 300)
        t += step
    return trainprof.analyze(b.write(tmp_path / "run.json"))


def live(phase_ms: list[float], step_ms: list[float], peak=None, total=None):
    window = Window(steps=len(step_ms), total_ms=sum(step_ms),
                    phase_ms=[p * len(step_ms) for p in phase_ms], samples=None, tokens=None)
    ordered = sorted(step_ms)
    figures = LiveFigures(rank=0, last_step=len(step_ms), measured=len(step_ms), elapsed_s=1.0,
                          recent=window, recent_ms=list(step_ms),
                          median_ms=ordered[len(ordered) // 2], p90_ms=ordered[-1],
                          samples_per_s=None, tokens_per_s=None, mfu=None,
                          peak_memory_bytes=peak, device_memory_bytes=total, finding=None)
    view = TimerView(last_step=len(step_ms), measured=len(step_ms), window=window,
                     step_ms=tuple(step_ms), spark_ms=tuple(step_ms), mfu=None,
                     optimizer="AdamW", optimizer_implementation="for-loop",
                     optimizer_tensors=150)
    return {v.id: v for v in live_verdicts(figures, view)}


def offline(analysis) -> dict:
    return {f.id: f for f in analysis.findings if f.rank == 0}


@pytest.mark.parametrize(("data_pct", "optimizer_pct"), [(12.0, 20.0), (4.0, 35.0), (25.0, 8.0)])
def test_phase_verdicts_agree_offline_live_and_in_the_checklist(tmp_path, data_pct, optimizer_pct):
    step = 1000.0
    analysis = recorded(tmp_path, data_pct * 10, optimizer_pct * 10, [step] * STEPS)
    r = analysis.ranks[0]
    phases = r.phases_pct
    # The trace's phases are what was built (the reference for everything below).
    assert phases["data"] == pytest.approx(data_pct, abs=0.01)
    assert phases["optimizer"] == pytest.approx(optimizer_pct, abs=0.01)
    phase_ms = [phases[p] / 100 for p in ("data", "forward", "backward", "optimizer", "other")]
    found, now = offline(analysis), live(phase_ms, [step / 1000] * STEPS)
    checklist = judge({p: phases[p] for p in ("data", "forward", "backward", "optimizer")},
                      "cpu", {})
    for rule, phase, threshold in (("data_loading", "data", verdicts.DATA_LOADING_PCT),
                                   ("optimizer_overhead", "optimizer", verdicts.OPTIMIZER_PCT)):
        fires = phases[phase] > threshold  # the rule's documented threshold, read by hand
        assert (rule in found) == (rule in now) == fires, rule
        assert (checklist.phase(phase).rule == rule) == fires, rule
        if fires:
            assert found[rule].severity == now[rule].severity
            assert found[rule].saving_pct == pytest.approx(now[rule].saving_pct, abs=0.01)


def test_step_variance_is_the_same_verdict_on_a_trace_and_a_live_window(tmp_path):
    """Two separate slow steps: the offline slow-step excess, not the mean minus the median."""
    steps = [1000.0] * 3 + [3000.0] + [1000.0] * 3 + [2600.0] + [1000.0] * 2
    analysis = recorded(tmp_path, 10.0, 10.0, steps)
    found = offline(analysis)["step_variance"]
    now = live([0.01, 0.49, 0.49, 0.01, 0.0], [s / 1000 for s in steps])["step_variance"]
    # By hand: median 1 ms, slow steps 3.0 and 2.6 ms, excess (2.0 + 1.6) / 10 steps per step
    # over a mean of 1.56 ms.
    expected = (2.0 + 1.6) / 10 / (sum(steps) / 1000 / 10) * 100
    assert found.saving_pct == pytest.approx(expected, rel=1e-6)
    assert now.saving_pct == pytest.approx(expected, rel=1e-6)
    assert found.severity == now.severity
    # A burst of consecutive slow steps is one episode: neither calls it step_variance.
    burst = [1.0] * 8 + [3.0, 3.0]
    assert verdicts.step_variance(step_spread(burst, last_is_flush=False)) is None
    assert "step_variance" not in live([0, 0.5, 0.5, 0, 0], burst)


@pytest.mark.parametrize("peak_pct", [95.0, 70.0, 30.0])
def test_memory_verdicts_agree_live_and_in_a_snapshot(peak_pct):
    from trainprof.analysis.snapshot.analyze import analyze_snapshot
    from trainprof.diagnose.snapshot import _full

    from helpers.snapshotgen import MiB, SnapshotBuilder

    total = 1000 * MiB
    b = SnapshotBuilder()
    b.segment([(int(total * peak_pct / 100), "active_allocated")])
    data = b.snapshot()
    data.setdefault("device_traces", [[]])
    now = live([0, 0.5, 0.5, 0, 0], [1.0] * 5, peak=int(total * peak_pct / 100), total=total)
    assert ("memory_pressure" in now) == (peak_pct >= verdicts.PRESSURE_PCT)
    assert ("memory_headroom" in now) == (peak_pct < verdicts.HEADROOM_PCT)
    data["trainprof"] = {"device_totals": {"0": total}}  # as trainprof's recorder writes it
    result = analyze_snapshot(data)
    assert result.devices[0].reserved_pct_of_device == pytest.approx(peak_pct, abs=0.01)
    assert bool(_full(result, None)) == ("memory_pressure" in now)
