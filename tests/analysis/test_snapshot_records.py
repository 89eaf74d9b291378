"""A memory snapshot's JSON result (`trainprof memory --format json`, the HTML report's
`memory_snapshots`) reads back into its records (`SnapshotResult`, with `decode.record`) and
writes the same JSON again, on the snapshots the tests build (tests/helpers/snapshotgen.py)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from trainprof.analysis.decode import record
from trainprof.analysis.snapshot.analyze import SnapshotResult
from trainprof.analysis.snapshot.breakdown import MemoryBreakdown, RecordedBy
from trainprof.diagnose.snapshot import snapshot_result
from trainprof.report.json import to_json_bytes

from helpers.round_trip import differences
from helpers.snapshotgen import (
    TORCH_LINEAR,
    MiB,
    SnapshotBuilder,
    frames,
    leaky_snapshot,
    real_shaped_run,
    real_shaped_snapshot,
)

BREAKDOWN = {"device": "cuda:0", "bytes": {"parameters": 40 * MiB, "gradients": 40 * MiB,
                                           "optimizer_state": 80 * MiB, "activations": 40 * MiB,
                                           "runtime": None, "process": None, "peak": 200 * MiB},
             "peak_source": "max_memory_allocated",
             "rows": [{"category": "optimizer_state", "device": "cuda:0", "dtype": "float32",
                       "bytes": 80 * MiB, "tensors": 4}],
             "optimizer_state_keys": {"exp_avg": 40 * MiB, "exp_avg_sq": 40 * MiB},
             "optimizer_state_per_parameter": 2.0, "notes": ["a note"]}


def oom() -> dict[str, Any]:
    """An out-of-memory error from fragmentation, in the history."""
    b = SnapshotBuilder()
    train = frames(TORCH_LINEAR, ("/job/train.py", 42, "train_step"))
    b.segment([(8 * MiB, "active_allocated", train), (6 * MiB, "inactive"),
               (4 * MiB, "active_allocated", train), (6 * MiB, "inactive")])
    b.trace("alloc", 8 * MiB, time_us=10, frames=train)
    b.trace("oom", 12 * MiB, time_us=30, device_free=2 * MiB)
    return b.snapshot()


def leaky(with_history: bool = True) -> dict[str, Any]:
    """Steps that each keep 3 MiB, with trainprof's own key (rank, step, breakdown)."""
    return leaky_snapshot({"rank": 1, "reason": "cycle", "step": 5, "memory_breakdown": BREAKDOWN,
                           "device_totals": {"0": 80 << 30}}, history=with_history)


SNAPSHOTS = {
    "oom": oom, "leaky": leaky, "no_history": lambda: leaky(False),
    "real_all": lambda: real_shaped_snapshot("all"),
    "real_python": lambda: real_shaped_snapshot("python"),
    "real_annotated": lambda: real_shaped_snapshot("all", annotate=True),
    "real_three_steps": lambda: real_shaped_run("all", steps=3, annotate=True).snapshot(),
}


def saved(tmp_path: Path, name: str) -> dict[str, Any]:
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(pickle.dumps(SNAPSHOTS[name]()))
    return json.loads(to_json_bytes(snapshot_result(path)))


@pytest.mark.parametrize("name", list(SNAPSHOTS))
def test_a_snapshot_result_reads_back_the_same(tmp_path: Path, name: str) -> None:
    data = saved(tmp_path, name)
    result = record(data, SnapshotResult, "snapshot")
    again = json.loads(to_json_bytes(result.to_dict()))
    assert differences(data, again) == []


def test_what_trainprof_recorded_reads_as_typed_fields(tmp_path: Path) -> None:
    result = record(saved(tmp_path, "leaky"), SnapshotResult, "snapshot")
    by = result.recorder
    assert (by.rank, by.reason, by.step) == (1, "cycle", 5)
    assert by.memory_breakdown == record(BREAKDOWN, MemoryBreakdown)
    assert by.memory_breakdown.bytes.optimizer_state == 80 * MiB
    assert by.memory_breakdown.rows[0].tensors == 4
    assert record(saved(tmp_path, "oom"), SnapshotResult, "snapshot").recorder == RecordedBy()
