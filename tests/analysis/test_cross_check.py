"""Cross-checks against Holistic Trace Analysis and TraceLens where the definitions agree.

HTA and TraceLens measure over the device span (first to last GPU event); our timeline gives
the same figures as ``device_span_*``. HTA drops the last ProfilerStep, we keep it, so traces
whose last step differs from the rest are compared with a wider tolerance (docs/metrics.md).
"""

from __future__ import annotations

import numpy as np
import pytest

import trainprof
from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.overview.timeline import gpu_timeline
from trainprof.trace.load import load_file

from helpers.paths import (
    ALEXNET,
    BERT,
    BIG_TRACE,
    COMPILED,
    NCCL_TRACE,
    NS_TRACE,
    PARAM,
    TIMESFORMER,
    TRACE_FILTER,
)


@pytest.mark.parametrize(
    "trace, idle, compute, tolerance",
    [
        (NS_TRACE, 2.63, 96.75, 1.5),
        (NCCL_TRACE, 77.78, 17.26, 2.0),
        (ALEXNET, 99.49, 0.08, 1.0),
        (TIMESFORMER, 0.97, 96.86, 1.0),  # TraceLens
        (BERT, 92.08, 7.86, 1.0),  # TraceLens
    ],
    ids=["ns_resolution", "nccl", "alexnet", "timesformer", "bert"],
)
def test_device_span_idle_and_compute(trace, idle, compute, tolerance):
    tl = trainprof.analyze(trace).ranks[0].timeline
    assert tl.device_span_idle_pct == pytest.approx(idle, abs=tolerance)
    assert tl.device_span_compute_pct == pytest.approx(compute, abs=tolerance)


def test_trace_filter_ranks_and_overlap():
    ranks = trainprof.analyze(TRACE_FILTER).ranks
    for r, (idle, compute) in zip(ranks, [(53.56, 17.71), (54.72, 22.57)], strict=True):
        assert r.timeline.device_span_idle_pct == pytest.approx(idle, abs=2.0)
        assert r.timeline.device_span_compute_pct == pytest.approx(compute, abs=1.0)
    assert ranks[1].timeline.comm_comp_overlap_pct == pytest.approx(20.05, abs=1.0)


def test_nccl_overlap():
    tl = trainprof.analyze(NCCL_TRACE).ranks[0].timeline
    assert tl.comm_comp_overlap_pct == pytest.approx(14.31, abs=2.0)


def test_compiled_trace_kernels_count_as_compute():
    tl = trainprof.analyze(COMPILED).ranks[0].timeline
    assert tl.device_span_compute_pct == pytest.approx(62.79, abs=6.0)
    assert tl.device_span_idle_pct == pytest.approx(36.94, abs=6.0)


def with_hta_conventions(path):
    """The trace and window as HTA 0.6 sees them: each event's start rounded up and its end
    rounded down to whole µs of the file's own clock (HTA's ``round_down_time_stamps``), the
    last ProfilerStep dropped, and the whole trace as the window when there are no steps."""
    trace = load_file(path)
    ev = trace.events
    base = (trace.metadata.get("baseTimeNanoseconds") or 0) / 1000.0
    offset = trace.t0_us - base  # our ts + offset = the ts written in the file
    start, end = np.ceil(ev.ts + offset), np.floor(ev.end + offset)
    ev.ts[:], ev.dur[:] = start - offset, np.maximum(end - start, 0.0)
    steps = find_steps(trace)
    if steps.source == "ProfilerStep":
        keep = slice(0, len(steps) - 1)
        steps = StepWindows(steps.numbers[keep], steps.starts[keep], steps.ends[keep], "HTA")
    else:
        steps = StepWindows(np.array([0]), np.array([float(ev.ts.min())]),
                            np.array([float(ev.end.max())]), "whole trace")
    return trace, steps


@pytest.mark.parametrize(
    "trace, idle, compute, overlap",
    [
        (NS_TRACE, 2.63, 96.75, None),
        (NCCL_TRACE, 77.78, 17.26, 14.31),
        (TRACE_FILTER / "sampled_rank-0.json.gz", 53.56, 17.71, 11.81),
        (TRACE_FILTER / "sampled_rank-1.json.gz", 54.72, 22.57, 20.05),
        (BIG_TRACE, 46.08, 35.55, 0.0),
        (ALEXNET, 99.49, 0.08, None),
        (PARAM, 67.40, 28.25, None),
        (COMPILED, 36.94, 62.79, None),
    ],
    ids=["ns_resolution", "nccl", "trace_filter0", "trace_filter1", "df_index_resolver",
         "alexnet", "param", "compiled"],
)
def test_hta_figures_with_htas_window_and_rounding(trace, idle, compute, overlap):
    """Where our figures differ from HTA's (docs/metrics.md), it is only HTA's window and its
    timestamp rounding: with both applied, the same intervals give HTA's numbers."""
    tl = gpu_timeline(*with_hta_conventions(trace))
    assert tl.device_span_idle_pct == pytest.approx(idle, abs=0.15)
    assert tl.device_span_compute_pct == pytest.approx(compute, abs=0.15)
    if overlap is None:
        assert tl.comm_comp_overlap_pct is None
    else:
        assert tl.comm_comp_overlap_pct == pytest.approx(overlap, abs=0.05)
