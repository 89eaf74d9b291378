"""Real CPU training runs with one injected bottleneck each: the top finding names it.

Each run is a few hundred milliseconds of training (tests/diagnose/workloads.py, and
jobs/ddp.py under torchrun for the two-rank cases), recorded with torch.profiler and analysed.
The machine is shared and noisy: the tests assert which finding comes first, never times.
"""

from __future__ import annotations

import io
import json
import re
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from trainprof.diagnose.rules.host import FIND_CONTENTION, STEADY_STEPS
from trainprof.report.terminal.report import print_analysis

import workloads
from recordings import ddp, recorded

pytestmark = pytest.mark.slow
FIXTURES = (ddp, recorded)  # pytest finds them here


def top(analysis):
    assert analysis.findings, "no finding at all"
    return analysis.findings[0]


def listed(analysis) -> list[tuple[str, str, float]]:
    """The findings in short, for assertion messages."""
    return [(f.id, f.severity, round(f.saving_pct, 1)) for f in analysis.findings]


def by_id(analysis):
    return {f.id: f for f in analysis.findings}


def ops_per_step(trace: Path) -> dict[int, int]:
    """Our own count, from the trace file: the cpu_op events starting in each ProfilerStep."""
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
             if e["name"].startswith("ProfilerStep#")]
    starts = [e["ts"] for e in events if e.get("cat") == "cpu_op"]
    return {n: sum(lo <= t < hi for t in starts) for n, lo, hi in steps}


def slow_and_median_ops(analysis) -> tuple[list[int], float]:
    """The slow steps' op counts and the median step's, counted in the trace by the test."""
    counts = ops_per_step(analysis.ranks[0].path)
    return [counts[n] for n in analysis.ranks[0].steps.slow_steps], statistics.median(
        counts.values())


def test_healthy_control_has_no_finding_and_says_where_the_time_goes(recorded):
    """None of the rules fires on the control (none in 16 recordings on the loaded 2-core test
    machine): each pathology's finding below comes from its one injected bottleneck. Something
    else can still take the machine during the recording (it did once in a CI run): then the
    one finding is step_variance, and it must say that the slow steps ran the same ops."""
    a = recorded("healthy")
    if a.findings:
        assert [f.id for f in a.findings] == ["step_variance"], listed(a)
        slow, median = slow_and_median_ops(a)
        assert slow and all(n == median for n in slow), (slow, median)
        assert "ran the same ops, slower" in a.findings[0].title
        return
    console = Console(record=True, width=100, file=io.StringIO())
    print_analysis(a, console)
    text = console.export_text()
    assert "No major bottleneck found. Where the time goes is below." in text
    assert text.index("No major bottleneck") < text.index("Training phases")


def test_slow_dataset_is_data_loading(recorded):
    a = recorded("slow_data")
    f = top(a)
    assert f.id == "data_loading" and f.severity == "high" and f.rank == 0, listed(a)
    loader = next(e for e in f.evidence if e.what == "data loader")
    assert loader.value == "_SingleProcessDataLoaderIter" and "num_workers=0" in loader.where
    assert "num_workers=4" in f.fix.pytorch


def test_per_parameter_optimizer_is_optimizer_overhead(recorded):
    a = recorded("per_param_optimizer")
    f = top(a)
    assert f.id == "optimizer_overhead", listed(a)
    ops = next(e for e in f.evidence if e.what == "ops per optimizer step")
    assert ops.value > 1000 and "Adam, for-loop" in ops.where


def test_graphs_kept_across_steps_are_memory_growth(recorded):
    """The kept metric is also a forward pass over four batches after every optimizer step:
    outside_training may come first, with the time it costs (memory_growth saves no time)."""
    a = recorded("leak")
    f = by_id(a).get("memory_growth")
    assert f is not None and f.saving_pct == 0, listed(a)
    assert top(a).id in ("memory_growth", "outside_training"), listed(a)
    growth = f.evidence[0]
    assert growth.unit == "MB/step" and growth.value >= 1.0 and "cpu" in growth.where


def test_periodic_slow_steps_are_step_variance(recorded):
    a = recorded("periodic")
    f = top(a)
    assert f.id == "step_variance", listed(a)
    named = next(e for e in f.evidence if e.what == "slow steps").value
    every = workloads.PERIOD
    steps = {int(n) for n in re.findall(r"#(\d+) \(", named)}
    assert len(steps & {every - 1, 2 * every - 1, 3 * every - 1}) >= 2, named  # the eval steps
    period = [e.value for e in f.evidence if e.what == "slow every"]
    assert period in ([every], [])  # absent when a noisy extra step breaks the pattern
    # The evaluation steps run more ops: the finding says extra work, with the test's counts.
    slow, median = slow_and_median_ops(a)
    ops = {e.what: e.value for e in f.evidence}
    assert ops["ops per step (median)"] == median
    assert ops["ops per slow step"] == round(statistics.mean(slow)) > median * 1.05
    assert f"each running {round(statistics.mean(slow) - median):,} more ops" in f.title
    assert f.fix == STEADY_STEPS


def test_contention_is_the_same_work_slower(recorded):
    """Busy processes share the core during two steps (workloads.contender): they are slow,
    run the same ops as the others (counted in the trace by the test), and the finding says so
    and points at the machine, not at periodic work in the loop; much of the extra time is
    inside the ops (the busy processes wake a millisecond into the step)."""
    a = recorded("contended")
    f = top(a)
    assert f.id == "step_variance", listed(a)
    steps = a.ranks[0].steps
    after = {n + 1 for n in workloads.CONTEND_AFTER}  # ProfilerStep#n is loop step n
    assert set(steps.slow_steps) & after, steps.slow_steps
    slow, median = slow_and_median_ops(a)
    assert all(n == median for n in slow), (slow, median)
    assert "ran the same ops, slower" in f.title and f.fix == FIND_CONTENTION
    excess = steps.slow_excess_by_category_ms  # the ops ran slower: a large part is in them
    assert excess.get("cpu_exec", 0.0) >= sum(excess.values()) / 3, excess
    assert "logging_overhead" not in by_id(a), listed(a)


def test_per_step_logging_is_logging_overhead(recorded):
    a = recorded("logging")
    f = top(a)
    assert f.id == "logging_overhead" and f.severity == "high", listed(a)
    spots = [e.where for e in f.evidence if e.what == "Python in that time"]
    # The logging function, or the work it calls (busy_python runs only there in this job).
    assert any(s.endswith(("_log_metrics", "busy_python")) for s in spots), \
        [(e.what, e.value, e.where) for e in f.evidence]


def test_ddp_large_model_tiny_batch_is_communication_exposed(ddp):
    a = ddp("comm")
    f = top(a)
    assert f.id == "communication_exposed", listed(a)
    assert a.ranks[0].sections.communication.source == "host ops"  # gloo on the CPU
    # One finding for the job, however many ranks show it (noise can make either rank a
    # straggler on this shared machine; the wait it causes is then left out of the other's).
    assert [x.id for x in a.findings].count("communication_exposed") == 1


def test_one_slow_rank_is_a_straggler(ddp):
    a = ddp("straggler")
    # Rank 1's own gloo all-reduce is real CPU work that slows down when the machine is loaded
    # (seen at 24-41% of its step): it can come first, but the straggler's cause is never
    # lower than second.
    assert {f.id for f in a.findings[:2]} & {"straggler", "data_loading"}, listed(a)
    assert all(f.rank == 1 for f in a.findings[:2]), listed(a)
    found = by_id(a)
    assert found["straggler"].rank == 1 and found["data_loading"].rank == 1
    # Rank 0's wait is charged to the straggler: the job's straggler analysis counts it as the
    # wait rank 1 causes, and no communication finding is about rank 0 for it (rank 0 may be
    # listed beside rank 1 for the transfer itself, what remains of its exposed communication
    # once the wait is taken out).
    stragglers = a.job.stragglers
    assert stragglers.ranks[1].caused_wait_ms_per_step > 0
    assert stragglers.ranks[0].waited_ms_per_step > 0
    assert all(f.rank != 0 for f in a.findings if f.id == "communication_exposed")
