"""Snapshot recording and the out-of-memory path, on the CPU.

This machine has no CUDA allocator, so `RecordedAllocator` stands in for it: it hands out a
snapshot built in the documented format and counts history starts and stops. The OOM path goes
through `on_out_of_memory`, the very function attached to torch as the allocator's observer.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from trainprof.capture import memory_snapshot
from trainprof.capture.config import record_every_step
from trainprof.capture.memory_snapshot import MAX_OOM_SNAPSHOTS, SnapshotRecorder, on_out_of_memory
from trainprof.capture.safety import RecordingWarning, WarnOnce
from trainprof.diagnose.snapshot import memory_snapshot_report
from trainprof.trace.snapshot import load_snapshot

from helpers.snapshotgen import MiB, SnapshotBuilder, frames

BREAKDOWN = {"device": "cuda:0", "bytes": {"parameters": 4 * MiB}}


class RecordedAllocator:
    """The caching allocator's history switch and snapshot, for a machine without CUDA."""

    def __init__(self) -> None:
        b = SnapshotBuilder()
        b.segment([(4 * MiB, "active_allocated", frames(("train.py", 9, "step"))), (6 * MiB, "inactive"),
                   (2 * MiB, "active_allocated"), (6 * MiB, "inactive")])
        self.state = b.snapshot()
        self.starts = self.stops = 0
        self.users_own = False

    def start(self) -> None:
        self.starts += 1

    def stop(self) -> None:
        self.stops += 1

    def recording_already(self) -> bool:
        return self.users_own

    def snapshot(self) -> dict:
        return copy.deepcopy(self.state)

    def device_totals(self) -> dict[str, int]:
        return {"0": 80 * 10**9}

    def attach_oom_observer(self, observer) -> None:
        assert observer is on_out_of_memory


@pytest.fixture
def allocator(monkeypatch):
    monkeypatch.setattr(memory_snapshot, "_ACTIVE", [])
    monkeypatch.setattr(memory_snapshot, "_attached", False)
    return RecordedAllocator()


def recorder(folder, allocator, schedule=record_every_step, rank=2) -> SnapshotRecorder:
    return SnapshotRecorder(folder, rank, WarnOnce(), schedule, breakdown=lambda: BREAKDOWN,
                            history=allocator)


def train_step_that_runs_out_of_memory() -> None:
    """What the allocator does on an OOM: call the observer, then raise."""
    on_out_of_memory(0, 10 * MiB, 6 * MiB, MiB)
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 10.00 MiB")


def test_an_oom_is_dumped_and_still_reaches_the_caller(tmp_path, allocator):
    rec = recorder(tmp_path, allocator)
    rec.start(0)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        try:
            train_step_that_runs_out_of_memory()
        finally:
            rec.close()
    (path,) = rec.oom_files
    assert path == tmp_path / "rank2.oom1.memory_snapshot.pickle"
    dumped = load_snapshot(path)  # the restricted reader: trainprof writes plain data only
    assert dumped["trainprof"]["oom"] == {"device": 0, "requested": 10 * MiB,
                                          "device_allocated": 6 * MiB, "device_free": MiB}
    assert dumped["trainprof"]["memory_breakdown"] == BREAKDOWN
    assert dumped["trainprof"]["device_totals"] == {"0": 80 * 10**9}
    (snapshot,) = memory_snapshot_report(path)["snapshots"]
    (oom,) = snapshot["ooms"]
    # 1 MiB free outside the cache and 12 MiB in free blocks, but none larger than 6 MiB
    assert (oom["cause"], oom["largest_free_block"]) == ("fragmentation", 6 * MiB)
    assert snapshot["findings"][0]["id"] == "memory_fragmentation"


def test_a_failing_dump_warns_once_and_the_oom_still_reaches_the_caller(tmp_path, allocator):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    rec = recorder(blocked, allocator)
    rec.start(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with pytest.raises(torch.OutOfMemoryError):
                train_step_that_runs_out_of_memory()
    assert [w.category for w in caught] == [RecordingWarning]
    assert "could not write the memory snapshot rank2.oom1" in str(caught[0].message)
    assert rec.oom_files == []
    rec.close()


def test_the_observer_dumps_only_while_recording_and_at_most_a_few(tmp_path, allocator):
    rec = recorder(tmp_path, allocator)
    rec.start(0)
    for _ in range(MAX_OOM_SNAPSHOTS + 2):
        on_out_of_memory(0, MiB, 0, 0)
    assert [p.name for p in rec.oom_files] == [
        f"rank2.oom{i}.memory_snapshot.pickle" for i in range(1, MAX_OOM_SNAPSHOTS + 1)]
    rec.close()
    on_out_of_memory(0, MiB, 0, 0)
    assert len(list(tmp_path.iterdir())) == MAX_OOM_SNAPSHOTS


def test_an_oom_leaving_the_block_is_dumped_when_the_observer_did_not(tmp_path, allocator):
    rec = recorder(tmp_path, allocator)
    rec.start(0)
    rec.dump_oom_on_exit(ValueError("not memory"))
    assert rec.oom_files == []
    rec.dump_oom_on_exit(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    (path,) = rec.oom_files
    assert "Tried to allocate 2 GiB" in load_snapshot(path)["trainprof"]["oom"]["message"]
    rec.close()


def test_history_covers_each_recorded_window_and_one_snapshot_per_cycle(tmp_path, allocator):
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2)
    rec = recorder(tmp_path, allocator, schedule, rank=0)
    rec.start(0)
    assert allocator.starts == 0  # step 0 is a wait step
    for step in range(1, 10):
        rec.at_step(step)
        if step in (3, 7):  # the profiler writes the cycle's trace at its last active step
            rec.cycle_done(step)
    rec.close()
    assert (allocator.starts, allocator.stops) == (2, 2)
    assert [p.name for p in rec.files] == ["rank0.step3.memory_snapshot.pickle",
                                          "rank0.step7.memory_snapshot.pickle"]
    info = load_snapshot(rec.files[1])["trainprof"]
    assert (info["reason"], info["step"], info["rank"]) == ("cycle", 7, 0)


def test_a_history_the_user_started_is_dumped_but_left_alone(tmp_path, allocator):
    allocator.users_own = True
    rec = recorder(tmp_path, allocator, rank=0)
    rec.start(0)
    rec.cycle_done(4)
    rec.close()
    assert (allocator.starts, allocator.stops) == (0, 0)  # not cleared, not switched off
    assert [p.name for p in rec.files] == ["rank0.step4.memory_snapshot.pickle"]
