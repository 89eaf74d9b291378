"""Cross-checks against Holistic Trace Analysis and TraceLens where the definitions agree.

HTA and TraceLens measure over the device span (first to last GPU event); our timeline gives
the same figures as ``device_span_*``. HTA drops the last ProfilerStep, we keep it, so traces
whose last step differs from the rest are compared with a wider tolerance (docs/metrics.md).
"""

from __future__ import annotations

import pytest

import trainprof

from conftest import ALEXNET, BERT, COMPILED, NCCL_TRACE, NS_TRACE, TIMESFORMER, TRACE_FILTER


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
