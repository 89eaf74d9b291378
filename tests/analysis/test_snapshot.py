"""Snapshot analysis on snapshots built in the documented format, with known answers."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.cuda import _memory_viz

from trainprof.analysis.snapshot.analyze import analyze_snapshot
from trainprof.diagnose.rules.memory import NO_LEAK
from trainprof.diagnose.snapshot import (
    HOLDER_FIXES,
    HOLDER_SHARE,
    UNSPLIT_CACHE,
    snapshot_findings,
)

from helpers.snapshotgen import (
    TORCH_LINEAR,
    TORCH_MODULE,
    AllocatorReplay,
    MiB,
    SnapshotBuilder,
    frames,
)

TRAIN_STEP = frames(TORCH_LINEAR, TORCH_MODULE, ("/home/user/job/train.py", 42, "train_step"))
MODEL = frames(("/home/user/job/model.py", 10, "__init__"))


def fragmented() -> SnapshotBuilder:
    """28 MiB reserved, 8.5 MiB allocated; 15.5 MiB free in split segments (the largest free
    block 6 MiB), 4 MiB in a wholly free segment."""
    b = SnapshotBuilder()
    b.segment([(2 * MiB, "active_allocated", TRAIN_STEP), (6 * MiB, "inactive"),
               (4 * MiB, "active_allocated", TRAIN_STEP), (6 * MiB, "inactive"),
               (2 * MiB, "active_allocated", MODEL), (2 * MiB, "inactive")])
    b.segment([(4 * MiB, "inactive")])  # wholly free: empty_cache() would return it
    b.segment([(MiB // 2, "active_allocated", MODEL), (3 * MiB // 2, "inactive")], kind="small",
              requested={0: 400_000})
    return b


def test_segments_blocks_and_fragmentation_have_the_known_sizes():
    snapshot = fragmented().snapshot()
    (d,) = analyze_snapshot(snapshot).devices
    assert (d.segments, d.segments_by_type) == (3, {"large": 2, "small": 1})
    assert d.reserved == 28 * MiB
    assert d.allocated == 8 * MiB + MiB // 2
    assert d.requested == 8 * MiB + 400_000
    assert d.inactive == 28 * MiB - d.allocated
    assert d.inactive_split == 14 * MiB + 3 * MiB // 2
    assert d.releasable == 4 * MiB
    assert d.largest_free == {"large": 6 * MiB, "small": 3 * MiB // 2}
    assert d.blocks == {"active_allocated": 4, "active_pending_free": 0, "inactive": 5}
    assert d.fragmentation_pct == pytest.approx(100 * 15.5 / 28)
    # torch's own summary of the same snapshot agrees (and checks the layout adds up)
    summary = _memory_viz.segsum(snapshot)
    assert "total_reserved: 28.0MiB" in summary


def test_out_of_memory_from_fragmentation_and_from_capacity():
    b = fragmented()
    b.trace("oom", 10 * MiB, device_free=MiB)  # 1 + 18 MiB free in the large pool; largest 6
    b.trace("oom", 40 * MiB, device_free=MiB)  # more than everything free together
    b.trace("oom", 5 * MiB, device_free=MiB)   # a 6 MiB block was free: not this snapshot's cause
    result = analyze_snapshot(b.snapshot())
    fragmentation, capacity, unknown = result.ooms
    assert (fragmentation.cause, fragmentation.requested, fragmentation.device_free) == (
        "fragmentation", 10 * MiB, MiB)
    assert (fragmentation.largest_free_block, fragmentation.cached_free) == (6 * MiB, 18 * MiB)
    assert capacity.cause == "capacity"
    assert unknown.cause == "unknown"
    ids = {f.id: f for f in snapshot_findings(result)}
    assert ids["memory_fragmentation"].severity == "high"
    assert ids["memory_fragmentation"].fix is UNSPLIT_CACHE
    assert "max_split_size_mb" in UNSPLIT_CACHE.pytorch
    assert "expandable_segments:True" in UNSPLIT_CACHE.pytorch
    # the capacity error's fix is the one for what holds the memory: the forward's outputs
    # (train_step -> Linear.forward) are 6 of the 8.5 MiB live, at least HOLDER_SHARE of it
    assert HOLDER_SHARE <= 6 / 8.5
    assert ids["memory_pressure"].fix is HOLDER_FIXES["activations"]
    assert ids["memory_pressure"].docs == "docs/rules.md#memory-pressure"


def test_free_blocks_of_another_stream_do_not_serve_the_request():
    b = fragmented()
    b.segment([(10 * MiB, "active_allocated", MODEL), (12 * MiB, "inactive")])
    b.segments[-1]["stream"] = 7  # a side stream's segment: its 12 MiB block serves only it
    b.trace("oom", 10 * MiB, device_free=MiB)
    b.device_traces[0][-1]["stream"] = 0
    (oom,) = analyze_snapshot(b.snapshot()).ooms
    assert (oom.cause, oom.largest_free_block, oom.cached_free) == ("fragmentation", 6 * MiB, 30 * MiB)
    b.device_traces[0][-1]["stream"] = 7
    (oom,) = analyze_snapshot(b.snapshot()).ooms
    assert (oom.cause, oom.largest_free_block) == ("unknown", 12 * MiB)


def test_the_oom_trainprof_saw_counts_when_the_history_has_none():
    snapshot = fragmented().snapshot()
    snapshot["trainprof"] = {"rank": 3, "reason": "oom",
                             "oom": {"device": 0, "requested": 12 * MiB, "device_free": 0}}
    (oom,) = analyze_snapshot(snapshot).ooms
    assert (oom.cause, oom.requested) == ("fragmentation", 12 * MiB)
    (finding,) = [f for f in snapshot_findings(analyze_snapshot(snapshot)) if f.severity == "high"]
    assert finding.rank == 3


def test_top_sites_are_the_first_user_frame_with_its_stack():
    result = analyze_snapshot(fragmented().snapshot())
    top, second = result.live_sites[:2]
    assert top.site == "/home/user/job/train.py:42 in train_step"
    assert (top.bytes, top.count) == (6 * MiB, 2)
    assert top.stack[0].endswith("torch/nn/modules/linear.py:125 in forward")
    assert (second.site, second.bytes, second.count) == ("/home/user/job/model.py:10 in __init__",
                                                          2 * MiB + MiB // 2, 2)


def test_fragmented_cache_without_oom_is_a_medium_finding():
    (finding,) = snapshot_findings(analyze_snapshot(fragmented().snapshot()))
    assert (finding.id, finding.severity) == ("memory_fragmentation", "medium")
    assert finding.saving_pct == 0.0


def leaky_run(steps: int = 6, leak: int = 3 * MiB) -> AllocatorReplay:
    """Weights (before the history starts), then steps that allocate activations and free them
    all but `leak` bytes (a tensor kept across steps)."""
    replay = AllocatorReplay()
    replay.alloc(50 * MiB, MODEL)
    replay.start_history()

    def work() -> None:
        acts = [replay.alloc(8 * MiB, TRAIN_STEP) for _ in range(4)]
        if leak:
            replay.alloc(leak, frames(("/home/user/job/train.py", 57, "log_metrics")))
        for addr in acts:
            replay.free(addr)

    for n in range(steps):
        replay.step(n, work)
    return replay


def test_timeline_steps_and_growth_from_the_history():
    result = analyze_snapshot(leaky_run().snapshot())
    (h,) = result.histories
    assert h.has_time and h.events == 6 * (5 + 4 * 2)  # history began after the weights
    assert h.timeline.live[0] == 50 * MiB + 8 * MiB  # the level before the history, plus the first alloc
    assert h.peak_live == 50 * MiB + 5 * 3 * MiB + 32 * MiB + 3 * MiB
    assert [s.allocations for s in h.steps] == [5] * 6
    assert [s.bytes for s in h.steps] == [35 * MiB] * 6
    assert [s.live_at_end for s in h.steps] == [50 * MiB + (n + 1) * 3 * MiB for n in range(6)]
    assert h.growth_mb_per_step == pytest.approx(3 * MiB / 1e6)
    assert h.leak_suspected
    (growth,) = [f for f in snapshot_findings(result) if f.id == "memory_growth"]
    assert growth.fix is NO_LEAK
    assert result.allocated_sites[0].site == "/home/user/job/train.py:42 in train_step"
    assert result.allocated_sites[0].bytes == 6 * 32 * MiB


def test_steady_steps_are_no_leak_and_timeline_is_downsampled():
    result = analyze_snapshot(leaky_run(steps=80, leak=0).snapshot())
    (h,) = result.histories
    assert not h.leak_suspected and h.growth_mb_per_step == pytest.approx(0.0, abs=1e-9)
    assert h.events > 600 >= len(h.timeline.ms) == len(h.timeline.live) == len(h.timeline.reserved)
    assert max(h.timeline.live) == h.peak_live == 82 * MiB  # the peak survives down-sampling
    assert h.timeline.reserved[0] == h.timeline.reserved[-1] == 512 * MiB
    # the cache is mostly free, but in one block that fits any request: not fragmentation
    assert snapshot_findings(result) == []


def test_a_snapshot_without_history_or_steps_says_so():
    result = analyze_snapshot(leaky_run().snapshot(history=False))
    assert result.histories == [] and result.allocated_sites == []
    assert "no allocator history" in result.notes[0]
    snap = leaky_run().snapshot()
    snap["external_annotations"] = []
    (h,) = analyze_snapshot(snap).histories
    assert h.steps == [] and "allocations per step are unknown" in h.notes[0]


def test_pressure_from_the_device_size_trainprof_records():
    snapshot = fragmented().snapshot()
    snapshot["trainprof"] = {"device_totals": {"0": 30 * MiB}}
    (d,) = analyze_snapshot(snapshot).devices
    assert d.reserved_pct_of_device == pytest.approx(100 * 28 / 30)
    ids = [f.id for f in snapshot_findings(analyze_snapshot(snapshot))]
    assert "memory_pressure" in ids


def train_with_adam(model, optimizer, steps: int = 3) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(32, 64)).pow(2).mean().backward()
        optimizer.step()


@pytest.mark.slow
def test_a_snapshot_torch_itself_makes_agrees_with_the_breakdown(tmp_path):
    """torch converts a profile with memory events into a snapshot (`_profile_to_snapshot`, the
    same format, CPU allocations included): real allocations, made by real training."""
    from trainprof.capture.memory_breakdown import tally
    from trainprof.diagnose.snapshot import memory_snapshot_report

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as prof:
        train_with_adam(model, optimizer)
    path = tmp_path / "from_profile.pickle"
    path.write_bytes(pickle.dumps(_memory_viz._profile_to_snapshot(prof)))
    (snap,) = memory_snapshot_report(path)["snapshots"]  # the restricted reader takes it
    params = (64 * 128 + 128 + 128 * 10 + 10) * 4
    persistent = params + params + 2 * params + 4 * 4  # weights, gradients, Adam's two, steps
    assert tally(model, optimizer).total() == persistent == 153_776
    # what is live when the profile ends is exactly what the breakdown counts
    assert snap["devices"][0]["allocated"] == persistent
    (history,) = snap["histories"]
    assert history["peak_live"] > persistent  # activations came and went
    # sites: profile stacks name a function by its first line, so the gradients and Adam's state
    # made in train_with_adam are one site; the parameters predate the profile: no stack
    made, older = snap["live_sites"]
    assert made["site"].endswith("in train_with_adam")
    assert (made["bytes"], made["count"]) == (persistent - params, 4 + 4 * 3)
    assert (older["site"], older["bytes"], older["count"]) == ("(no stack recorded)", params, 4)
