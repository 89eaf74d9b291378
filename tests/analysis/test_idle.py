"""Idle time: exact answers on a synthetic trace, HTA's idle share on the shared traces."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.analysis.sections.idle import KERNEL_WAIT_MAX_US, idle_time
from trainprof.trace.load import load_file

from helpers.paths import BIG_TRACE, NCCL_TRACE, NS_TRACE, TRACE_FILTER

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"



@functools.cache
def loaded(path):
    """Real traces are loaded once per test module (the analyses only read them)."""
    return load_file(path)

def gaps_trace(b):
    """Stream 7: K1 10-110, K2 120-200 (launched early: kernel wait 10), K3 310-400 (launched
    at 300, after K2 ended: host wait 110), K4 500-600 (launched early, gap 100: other).
    Stream 8: K5 150-250 with no launch. The device as a whole: kernel wait 10 (120),
    host wait 60 (250-310), other 100 (400-500)."""
    b.step(1, 0, 1000)
    b.annotation("## forward ##", 0, 900)  # an annotation without a role: never listed
    b.launch(0, 5, k_ts=10, k_dur=100)
    b.launch(20, 5, k_ts=120, k_dur=80)
    b.launch(300, 5, k_ts=310, k_dur=90)
    b.launch(320, 5, k_ts=500, k_dur=100)
    b.op("aten::item", 390, 90)  # 80 µs inside the 400-500 gap
    b.annotation(LOADER, 485, 30)  # 15 µs inside it
    b.stream = 8
    b.kernel("k5", 150, 100)
    return b


def test_gaps_are_classified_exactly(tmp_path, builder):
    trace = load_file(gaps_trace(builder).write(tmp_path / "t.json"))
    result = idle_time(trace, find_steps(trace))
    (device,) = result.devices
    assert (device.host_wait_us, device.kernel_wait_us, device.other_us) == (60, 10, 100)
    assert device.span_us == 590 and device.gaps == 3 and device.events == 5
    s7, s8 = result.streams
    assert (s7.stream, s7.host_wait_us, s7.kernel_wait_us, s7.other_us) == (7, 110, 10, 100)
    assert (s8.stream, s8.gaps, s8.idle_us) == (8, 0, 0)
    d = device.to_dict()
    assert d["idle_pct_of_span"] == pytest.approx(170 / 590 * 100)
    assert d["host_wait_pct_of_idle"] == pytest.approx(60 / 170 * 100)

    longest = result.longest[0]
    assert (longest.duration_us, longest.category, longest.step) == (100, "other", 1)
    assert longest.start_ms == pytest.approx(0.4)
    assert [(h.name, h.overlap_us) for h in longest.host] == [("aten::item", 80), (LOADER, 15)]
    assert longest.no_host_op_us == pytest.approx(5)
    second = result.longest[1]
    assert (second.duration_us, second.category) == (60, "host_wait")
    assert [h.name for h in second.host] == ["cudaLaunchKernel"]
    assert "## forward ##" not in {h.name for g in result.longest for h in g.host}


def test_kernel_wait_threshold_is_in_microseconds():
    assert KERNEL_WAIT_MAX_US == 30.0


def test_trace_without_device_events(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.op("aten::add", 10, 20)
    trace = load_file(builder.write(tmp_path / "t.json"))
    result = idle_time(trace, find_steps(trace))
    assert result.devices == [] and result.to_dict()["longest_gaps"] == []


def _hta_window(trace):
    """HTA drops the last ProfilerStep; so do we, to compare like with like."""
    s = find_steps(trace)
    return StepWindows(s.numbers[:-1], s.starts[:-1], s.ends[:-1], s.source)


@pytest.mark.parametrize(
    "path, hta_idle_pct",
    [
        (BIG_TRACE, 46.08),
        (NCCL_TRACE, 77.78),
        (NS_TRACE, 2.63),
        (TRACE_FILTER / "sampled_rank-0.json.gz", 53.56),
        (TRACE_FILTER / "sampled_rank-1.json.gz", 54.72),
    ],
    ids=["df_index_resolver", "nccl", "ns_resolution", "filter_rank0", "filter_rank1"],
)
def test_device_idle_matches_hta(path, hta_idle_pct):
    trace = loaded(path)
    device = idle_time(trace, _hta_window(trace)).devices[0]
    assert device.to_dict()["idle_pct_of_span"] == pytest.approx(hta_idle_pct, abs=2.0)


def test_big_trace_streams_and_gaps():
    trace = loaded(BIG_TRACE)
    result = idle_time(trace, find_steps(trace))
    assert [r.stream for r in result.streams] == [7, 14]  # compute, NCCL
    assert all(r.idle_us == pytest.approx(r.host_wait_us + r.kernel_wait_us + r.other_us)
               for r in result.streams)
    # The longest gaps come between steps, while the optimizer runs on the host.
    assert len(result.longest) == 10
    assert any(h.name.startswith("Optimizer.") for h in result.longest[0].host)


def test_to_pandas(tmp_path, builder):
    pd = pytest.importorskip("pandas")
    trace = load_file(gaps_trace(builder).write(tmp_path / "t.json"))
    frame = idle_time(trace, find_steps(trace)).to_pandas()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 3


def test_far_apart_times_neither_overflow_nor_lose_nesting():
    """Times near 1e300 µs (a damaged trace that still reads) on several threads: the running
    maximum per thread is exact, with no float overflow (it used to lift each thread by the
    whole time span, which overflowed to inf)."""
    import warnings

    from trainprof.analysis.calls.nesting import HostRanges, grouped_running_max

    ends = np.array([5.0, 3.0, 1e300, 2.0, 7.0, 1.0])
    groups = np.array([0, 0, 0, 1, 1, 2])
    assert grouped_running_max(ends, groups).tolist() == [5.0, 5.0, 1e300, 2.0, 7.0, 1.0]
    ts = np.array([0.0, 1.0, 1e299, 0.0, 1.0, 1e300])
    end = np.array([10.0, 2.0, 1e300, 5.0, 2.0, 1e300 + 1e285])
    thread = np.array([0, 0, 0, 1, 1, 3])
    ranges = HostRanges.of(ts, end, thread, np.arange(6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.seterr(over="raise")
        try:
            top = ranges.top_level()
            inner = ranges.innermost(np.array([1.5, 1.5, 1e300 + 1e284]), np.array([0, 1, 3]))
        finally:
            np.seterr(over="warn")
    by_index = dict(zip(ranges.index.tolist(), top.tolist(), strict=True))
    assert by_index == {0: True, 1: False, 2: True, 3: True, 4: False, 5: True}
    assert [int(ranges.index[i]) for i in inner] == [1, 4, 5]
