"""The critical path: synthetic steps whose path and what-ifs are worked out by hand, and real
traces checked against what a replay must reproduce."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainprof.analysis.critical_path import critical_path
from trainprof.analysis.critical_path.graph import build_graph
from trainprof.analysis.critical_path.points import DeviceEvents
from trainprof.analysis.critical_path.replay import WhatIfReplay, replay, step_ends
from trainprof.analysis.critical_path.waits import other_stream_ends
from trainprof.analysis.overview.steps import StepWindows, find_steps
from trainprof.trace.load import load_file

from helpers.paths import ALEXNET, NS_TRACE, RESNET_W0, RESNET_W0_SPAN2

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _analyse(builder, tmp_path):
    trace = load_file(builder.write(tmp_path / "t.json"))
    return trace, critical_path(trace, find_steps(trace))


def _item(result, kind, name):
    return next(i for i in result.items if (i.kind, i.name) == (kind, name))


def test_gpu_bound_step(builder, tmp_path):
    # Five 150 µs GEMMs queued back to back from 20 µs; the host waits in a device sync until
    # 2 µs after the last one ends (770), then runs untraced to the step's end at 1000.
    builder.step(1, 0, 1000)
    builder.op("aten::mm", 0, 100)
    for i in range(5):
        builder.launch(10 + 10 * i, 5, name="gemm", k_ts=20 + 150 * i, k_dur=150)
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 110, 662)
    _, result = _analyse(builder, tmp_path)
    step = result.steps[0]
    assert step.step_us == pytest.approx(1000)
    split = step.split_us
    # mm before the first launch 10, the launch to its kernel 10, the kernels 750, the sync's
    # return 2, and the untraced tail 228: the whole step.
    assert split["host_compute"] == pytest.approx(10)
    assert split["launch_overhead"] == pytest.approx(10)
    assert split["gpu_compute"] == pytest.approx(750)
    assert split["sync_wait"] == pytest.approx(2)
    assert split["untraced_host"] == pytest.approx(228)
    assert sum(split.values()) == pytest.approx(step.step_us)
    gemm = _item(result, "kernel", "gemm")
    # At zero each GEMM starts 10 µs (the typical launch lag) after its launch: the last at 60,
    # so the sync returns at its own start (110) and the tail follows: 110 + 228.
    assert gemm.step_ms_if_zero == pytest.approx(0.338)
    # At half: they end at 20 + 5 * 75 = 395, the sync at 397, the step at 397 + 228.
    assert gemm.step_ms_if_half == pytest.approx(0.625)
    assert result.saving_cap_pct("kernel", "gemm") == pytest.approx(100 * (1000 - 338) / 1000)


def test_a_step_whose_work_ended_before_it_has_no_negative_time(tmp_path):
    """Hypothesis found it: step 1 re-timed to an empty device span (its only kernel takes no
    time while step 0's kernel runs on), so its path ends before it starts. The path takes no
    time there, and the split still adds up to the steps (gpu_compute 100%, not 101%)."""
    def x(cat, name, ts, dur, pid=100, tid=100, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
                "dur": dur, "args": args}
    kernel = "volta_sgemm_128x64_nn"
    events = [x("cpu_op", "ProfilerStep#0", 0.0, 50.0),
              x("cuda_runtime", "cudaLaunchKernel", 0.0, 1.0, correlation=1000),
              x("kernel", kernel, 0.0, 101.0, pid=0, tid=7, device=0, stream=7, correlation=1000),
              x("cpu_op", "ProfilerStep#1", 50.0, 50.0),
              x("cuda_runtime", "cudaLaunchKernel", 50.0, 1.0, correlation=1001),
              x("kernel", kernel, 50.0, 0.0, pid=0, tid=7, device=0, stream=7, correlation=1001)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_file(path)
    result = critical_path(trace, find_steps(trace))
    assert [s.step_us for s in result.steps] == [pytest.approx(101.0), 0.0]
    assert sum(result.split_pct.values()) == pytest.approx(100.0)
    assert result.split_pct["gpu_compute"] == pytest.approx(100.0)


def test_host_bound_step(builder, tmp_path):
    # Two Python-heavy ops launch one small kernel each at their very end; the GPU idles.
    builder.step(1, 0, 1000)
    builder.op("model.slow_a", 0, 400)
    builder.launch(390, 5, name="ka", k_ts=400, k_dur=10)
    builder.op("model.slow_b", 400, 500)
    builder.launch(890, 5, name="kb", k_ts=900, k_dur=10)
    _, result = _analyse(builder, tmp_path)
    split = result.steps[0].split_us
    assert split["gpu_compute"] == 0
    assert split["host_compute"] == pytest.approx(390 + 5 + 490 + 5)
    assert split["launch_overhead"] == pytest.approx(10)
    assert split["untraced_host"] == pytest.approx(100)
    b = _item(result, "op", "model.slow_b")
    assert b.on_path_us == pytest.approx(495)
    # Its own time (not the launch inside it) gone: the step ends 495 µs earlier.
    assert b.step_ms_if_zero == pytest.approx((1000 - 495) / 1000)
    assert b.step_ms_if_half == pytest.approx((1000 - 495 / 2) / 1000)
    assert result.items[0].name == "model.slow_b"  # the most time on the path first


def test_sync_serialises_host_and_device(builder, tmp_path):
    # A 200 µs kernel, a stream sync waiting for it, then host work that cannot start earlier.
    builder.step(1, 0, 420)
    builder.launch(5, 5, name="k1", k_ts=15, k_dur=200)  # ends at 215
    builder.event("cuda_runtime", "cudaStreamSynchronize", 20, 197)  # returns at 217
    builder.op("aten::add", 220, 100)
    builder.launch(300, 5, name="k2", k_ts=310, k_dur=100)  # ends at 410, off the path
    _, result = _analyse(builder, tmp_path)
    step = result.steps[0]
    names = {p.name for p in step.pieces.longest(100)}
    assert {"k1", "aten::add"} <= names and "k2" not in names
    assert step.split_us["gpu_compute"] == pytest.approx(200)
    assert step.split_us["sync_wait"] == pytest.approx(2)
    k1 = _item(result, "kernel", "k1")
    # k1 at zero: it ends at its start (15), so the sync returns as soon as it is called (20,
    # later than 15 + its 2 µs lag); the 203 µs of host work after it (217 -> 420) follow.
    assert k1.step_ms_if_zero == pytest.approx((20 + 203) / 1000)


def test_collective_waits_for_the_compute_stream(builder, tmp_path):
    builder.step(1, 0, 530)
    builder.launch(10, 5, name="k1", k_ts=20, k_dur=200)  # compute stream, ends at 220
    builder.stream = 14
    builder.launch(15, 5, name=NCCL, k_ts=220, k_dur=300)  # waits for k1 (a stream wait)
    builder.stream = 7
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 30, 495)  # returns at 525
    _, result = _analyse(builder, tmp_path)
    step = result.steps[0]
    assert step.split_us["gpu_communication"] == pytest.approx(300)
    assert step.split_us["gpu_compute"] == pytest.approx(200)
    lanes = [p.lane for p in step.pieces.longest(100)]
    assert "GPU 0 stream 7" in lanes and "GPU 0 stream 14" in lanes
    allreduce = _item(result, "collective", "all_reduce")
    # The all-reduce at zero ends when k1 does (220): the sync returns 5 µs later, then 5 µs
    # of untraced host to the step's end.
    assert allreduce.step_ms_if_zero == pytest.approx(0.230)
    compute = _item(result, "kernel", "k1")
    # k1 at zero: the all-reduce starts on its own terms, its launch (15) + 10 µs (the typical
    # launch lag, from k1: the all-reduce's own wait is not a launch lag), and still runs
    # 300 µs: 15 + 10 + 300, the sync's 5 and the tail's 5.
    assert compute.step_ms_if_zero == pytest.approx(0.335)


def test_host_only_trace(builder, tmp_path):
    # A CPU run: ops, a sync call that waits for nothing, and a DataLoader wait.
    builder.step(1, 0, 500)
    builder.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 200)
    builder.op("aten::linear", 200, 250)
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 460, 10)
    _, result = _analyse(builder, tmp_path)
    split = result.steps[0].split_us
    assert split["data_loading"] == pytest.approx(200)
    assert split["host_compute"] == pytest.approx(250)
    assert split["sync_wait"] == pytest.approx(10)  # the call's own time: nothing to wait for
    assert split["untraced_host"] == pytest.approx(40)
    loader = _item(result, "data_loader", "DataLoader")
    assert loader.step_ms_if_zero == pytest.approx(0.3)


def test_a_long_trace_keeps_evenly_spaced_steps(builder, tmp_path, monkeypatch):
    from trainprof.analysis.critical_path import section

    for n in range(10):  # ten host-bound steps of 100 µs, three events each
        builder.step(n, 100 * n, 100)
        builder.op("aten::add", 100 * n + 10, 50)
        builder.launch(100 * n + 20, 5, name="k", k_ts=100 * n + 30, k_dur=5)
    monkeypatch.setattr(section, "STEP_EVENTS", 12)  # room for about three steps
    _, result = _analyse(builder, tmp_path)
    assert [s.step for s in result.steps] == [0, 4, 9]
    assert "3 of the 10 steps" in result.notes[0]
    assert all(s.step_us == pytest.approx(100) for s in result.steps)


def test_a_step_of_instants_and_a_broken_clock(builder, tmp_path):
    builder.step(1, 0, 0)  # nothing takes any time: a path without pieces
    builder.op("aten::add", 0, 0)
    _, result = _analyse(builder, tmp_path)
    assert [len(s.pieces) for s in result.steps] == [0]
    builder.op("aten::mul", 2e11, 10)  # two days later: the clocks are broken
    _, result = _analyse(builder, tmp_path)
    assert result.steps == [] and "more than a day" in result.notes[0]


def test_empty_trace_window(builder, tmp_path):
    builder.op("aten::add", 0, 10)
    trace = load_file(builder.write(tmp_path / "t.json"))
    w = StepWindows(numbers=np.array([1]), starts=np.array([1e6]), ends=np.array([2e6]),
                    source="annotation")
    result = critical_path(trace, w)
    assert result.steps == [] and result.items == [] and result.notes


@pytest.mark.parametrize("path", [RESNET_W0, RESNET_W0_SPAN2, ALEXNET, NS_TRACE],
                         ids=["resnet50", "resnet50-span2", "alexnet", "gpu-bound-resnet"])
def test_replay_reproduces_the_recorded_times(path):
    trace = load_file(path)
    g = build_graph(trace, find_steps(trace))
    t, converged = replay(g, start=g.time)
    assert converged
    # Every point is explained by one input and no input is later than it was recorded.
    assert np.array_equal(t, g.time)
    # The what-if replay (touched points only, in topological order) agrees with the full
    # replay when nothing changes, even where a sync returned before its work was seen ending.
    fast = WhatIfReplay(g, t)
    assert np.array_equal(fast.step_ends(g.weight), step_ends(g, t))
    # ... and, with the item of the longest edge at zero, the full replay from the anchors.
    heaviest = int(np.argmax(np.where(g.item >= 0, g.weight, -1)))
    w = np.where(g.item == g.item[heaviest], 0, g.weight)
    assert np.array_equal(fast.step_ends(w), step_ends(g, replay(g, w)[0]))
    # ... also given only the changed weights (the what-ifs' way), at half their time.
    pos = np.flatnonzero(g.item == g.item[heaviest])
    half = np.rint(g.weight[pos] * 0.5).astype(np.int64)
    w = g.weight.copy()
    w[pos] = half
    assert np.array_equal(fast.changed_step_ends(pos, half), step_ends(g, replay(g, w)[0]))


def _window(path, name, instance):
    """(start, end) µs of the ``instance``-th event named ``name``, read with json alone."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    hits = [e for e in events if e.get("name") == name and e.get("ph") == "X"]
    return hits[instance]["ts"], hits[instance]["ts"] + hits[instance]["dur"], events


def test_alexnet_measured_forward_ends_with_its_last_kernel_and_sync():
    # HTA's own test window: the second "measure|forward" annotation.
    start, end, events = _window(ALEXNET, "[param|pytorch.model.alex_net|0|0|0|measure|forward]",
                                 1)
    trace = load_file(ALEXNET)
    t0 = trace.t0_us
    w = StepWindows(numbers=np.array([1]), starts=np.array([start - t0]),
                    ends=np.array([end - t0]), source="annotation")
    result = critical_path(trace, w)
    step = result.steps[0]
    assert step.step_us == pytest.approx(end - start, abs=0.01)
    assert sum(step.split_us.values()) == pytest.approx(step.step_us)
    # The last kernel to end in the window, found from the raw events, is on the path.
    kernels = [e for e in events if e.get("cat") == "kernel" and start <= e["ts"] <= end]
    last = max(kernels, key=lambda e: e["ts"] + e["dur"])
    pieces = step.pieces.longest(10_000)
    on_path = {p.name for p in pieces if p.lane.startswith("GPU")}
    assert last["name"] in on_path
    # The window is host-bound (cudaMalloc inside the convolutions), as HTA's path says.
    host = step.split_us["host_compute"] + step.split_us["untraced_host"]
    assert host > 0.8 * step.step_us
    assert _item(result, "op", "cudaMalloc").on_path_pct > 50


def test_gpu_bound_training_runs_on_the_gpu():
    # The host runs a step ahead of the GPU; each step's path starts where the GPU finished the
    # step before and runs through its kernels (HTA: 96.75% of the GPU's time is compute).
    trace = load_file(NS_TRACE)
    result = critical_path(trace, find_steps(trace))
    assert result.split_pct["gpu_compute"] > 90
    for step in result.steps:
        assert sum(step.split_us.values()) == pytest.approx(step.step_us)


def test_resnet_waits_for_its_data_loader():
    # num_workers=0: the plugin's DataLoader share is 33.4%; on the path, a third too.
    trace = load_file(RESNET_W0)
    result = critical_path(trace, find_steps(trace))
    assert 30 < result.split_pct["data_loading"] < 34
    loader = _item(result, "data_loader", "DataLoader")
    assert loader is result.items[0]
    assert loader.saving_pct_if_zero == pytest.approx(loader.on_path_pct, abs=1.0)



@pytest.mark.parametrize("path", [RESNET_W0, RESNET_W0_SPAN2, NS_TRACE],
                         ids=["resnet50", "resnet50-span2", "gpu-bound-resnet"])
def test_no_what_if_saves_more_than_its_time_on_the_path(path):
    # Removing work cannot shorten a step by more than that work's time on its path (the old
    # path, less that work, is still a path): the bound the findings are capped with.
    trace = load_file(path)
    result = critical_path(trace, find_steps(trace))
    assert result.items
    for item in result.items:
        assert item.saving_pct_if_zero <= item.on_path_pct + 1e-6, item
        assert item.step_ms_if_zero <= item.step_ms_if_half <= item.step_ms


@pytest.mark.parametrize("codes", [[5, 3, 5, 0, 3, 9], [7], [], [-1, 4, -1, 2], [10**7, 3, 10**7]])
def test_item_ids_match_a_sort(codes):
    # Ids are handed out in sorted code order, each code's id at each of its places, whether
    # the table looks codes up (small, non-negative) or sorts them (any others).
    from trainprof.analysis.critical_path.categories import ItemTable

    table = ItemTable()
    table.id("op", "first")  # ids continue after what the table already holds
    arr = np.array(codes, dtype=np.int32)
    ids = table.ids("kernel", arr, lambda c: f"k{c}")
    uniq = sorted(set(codes))
    assert ids.dtype == np.int64
    assert ids.tolist() == [1 + uniq.index(c) for c in codes]
    assert table.items == [("op", "first")] + [("kernel", f"k{c}") for c in uniq]


@pytest.mark.parametrize("stretches", [1, 3, 40, 2000])
def test_step_counts_match_a_binary_search(stretches):
    # Times in sorted stretches (a thread's ranges in call-tree order), steps starting on some
    # of those times exactly: the counts per stretch are numpy's binary search's, ends too.
    from trainprof.analysis.critical_path.points import ends_at_or_before, starts_at_or_before

    rng = np.random.default_rng(stretches)
    begin = np.concatenate([np.sort(rng.integers(0, 10**6, 20_000 // stretches))
                            for _ in range(stretches)])
    end = begin + rng.integers(-5, 3000, len(begin))  # a few ranges end before they begin
    starts = np.unique(np.r_[rng.integers(0, 10**6, 30), begin[:5]])
    at_begin = starts_at_or_before(starts, begin)
    assert at_begin.tolist() == np.searchsorted(starts, begin, side="right").tolist()
    at_end = ends_at_or_before(starts, begin, end, at_begin)
    assert at_end.tolist() == np.searchsorted(starts, end, side="right").tolist()
    # Unsorted starts: numpy's search as it is, whatever it makes of them.
    shuffled = starts[::-1].copy()
    at_begin = starts_at_or_before(shuffled, begin)
    assert at_begin.tolist() == np.searchsorted(shuffled, begin, side="right").tolist()
    assert ends_at_or_before(shuffled, begin, end, at_begin).tolist() == \
        np.searchsorted(shuffled, end, side="right").tolist()


def graph_and_what_ifs(path):
    """The trace's critical-path graph and its what-if replay from the full replay's times."""
    trace = load_file(path)
    g = build_graph(trace, find_steps(trace))
    t, _ = replay(g, start=g.time)
    return g, WhatIfReplay(g, t)


@pytest.mark.parametrize("path", [RESNET_W0, NS_TRACE], ids=["resnet50", "gpu-bound-resnet"])
def test_what_ifs_with_runs_folded_match_the_full_replay(path):
    # Kernels queued from one stretch of host time are folded into runs (runs.py); with any
    # weights lowered (an item at zero or half, random points at random fractions) the step
    # ends are still those of the full replay of the unfolded graph from its anchors.
    g, fast = graph_and_what_ifs(path)
    assert fast._runs is not None and len(fast._runs) > 10
    rng = np.random.default_rng(3)
    launches = np.flatnonzero(g.category == 1)  # the launch calls: edges in every run
    for pos, scale in [(launches, 0.0), (launches, 0.5),
                       (np.flatnonzero(rng.random(len(g.time)) < 0.2), 0.3),
                       (np.flatnonzero(g.item == g.item[np.argmax(g.weight)]), 0.0)]:
        w = g.weight.copy()
        w[pos] = np.rint(g.weight[pos] * scale).astype(np.int64)
        assert np.array_equal(fast.changed_step_ends(pos, w[pos]),
                              step_ends(g, replay(g, w)[0]))


@pytest.mark.parametrize("path", [RESNET_W0, NS_TRACE], ids=["resnet50", "gpu-bound-resnet"])
def test_what_ifs_reuse_the_reads_of_their_points(path):
    # The what-ifs find where an item's points fall among the edges once (``reads``) and
    # replay it at each scale from them: the same step ends as the full replay.
    g, fast = graph_and_what_ifs(path)
    pos = np.flatnonzero(g.item == g.item[np.argmax(g.weight)])
    reads = fast.reads(pos)
    for scale in (0.0, 0.5):
        w = g.weight.copy()
        w[pos] = np.rint(g.weight[pos] * scale).astype(np.int64)
        assert np.array_equal(fast.changed_step_ends(pos, w[pos], reads=reads),
                              step_ends(g, replay(g, w)[0]))


def _other_stream_ends_by_group(d, device_of):
    """other_stream_ends as it was written first: one (step, device) group at a time."""
    group = d.step * 4096 + device_of
    out = np.full(len(d.event), -1, dtype=np.int64)
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        by_end = members[np.argsort(d.end[members], kind="stable")]
        hit = np.searchsorted(d.end[by_end], d.start[members], side="right") - 1
        for k, i in enumerate(members):
            for h in range(hit[k], max(hit[k] - 8, -1), -1):
                if d.chain_key[by_end[h]] != d.chain_key[i]:
                    out[i] = by_end[h]
                    break
    return out


@given(st.integers(0, 2**32 - 1), st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_other_stream_ends_match_a_search_per_group(seed, m):
    # Events of a few steps, devices and streams at random (ties, and streams that run many
    # events back to back): each event's latest other-stream end of its step and device.
    rng = np.random.default_rng(seed)
    step, dev, stream = (rng.integers(0, k, m) for k in (3, 2, 3))
    start = rng.integers(0, 40, m)
    end = start + rng.integers(0, 10, m)
    d = DeviceEvents(event=np.arange(m), step=step, start=start, end=end,
                     chain_key=(step * 2 + dev) * 3 + stream,
                     launch_point=np.full(m, -1), launch_end_point=np.full(m, -1),
                     issued=start, before=np.full(m, -1))
    assert np.array_equal(other_stream_ends(d, dev), _other_stream_ends_by_group(d, dev))


@given(st.integers(0, 2**32 - 1), st.integers(0, 50), st.sampled_from([10, 10**6, 2**61]))
@settings(max_examples=80, deadline=None)
def test_chain_time_order_matches_a_lexsort(seed, m, span):
    # Host points by (chain, time, tie): one sort of a packed key, or the lexsort itself where
    # the three do not fit in one integer (a span of 2**61 ns).
    from trainprof.analysis.critical_path.points import _chain_time_order

    rng = np.random.default_rng(seed)
    chain_key = rng.integers(0, 7, m)
    t = rng.integers(0, 4, m) * (span // 4) - span // 8
    tie = rng.permutation(2 * m + 3)[:m]
    assert np.array_equal(_chain_time_order(chain_key, t, tie, 2 * m + 3),
                          np.lexsort((tie, t, chain_key)))


def test_chains_scanned_one_by_one_or_at_once_agree(monkeypatch):
    # A few chains are scanned one by one, many in one pass over all of them: the same times.
    from trainprof.analysis.critical_path import replay as replay_module

    trace = load_file(RESNET_W0)
    g = build_graph(trace, find_steps(trace))
    w = np.where(g.item == g.item[np.argmax(g.weight)], 0, g.weight)
    one_by_one = replay(g, w)
    monkeypatch.setattr(replay_module, "CHAINS_ONE_BY_ONE", 0)
    at_once = replay(g, w)
    assert one_by_one[1] and at_once[1]
    assert np.array_equal(one_by_one[0], at_once[0])
