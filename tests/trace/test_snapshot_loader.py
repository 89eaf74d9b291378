"""The snapshot reader refuses pickles that would run code, and reads real-shaped ones."""

from __future__ import annotations

import gzip
import os
import pickle

import pytest

from trainprof.trace.snapshot import (
    SnapshotError,
    UnsafeSnapshotError,
    find_snapshot_files,
    load_snapshot,
)

from helpers.snapshotgen import MiB, SnapshotBuilder, frames


class RunsACommand:
    """Unpickling this calls os.system: what a hostile 'snapshot' would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def legit_snapshot() -> dict:
    b = SnapshotBuilder()
    b.segment([(2 * MiB, "active_allocated", frames(("train.py", 3, "step"))), (2 * MiB, "inactive")])
    b.trace("alloc", 2 * MiB, addr=0, time_us=5)
    return b.snapshot()


@pytest.mark.parametrize("where", ["top", "nested"])
def test_a_pickle_that_runs_code_is_refused_and_runs_nothing(tmp_path, where):
    marker = tmp_path / "pwned"
    payload = RunsACommand(str(marker))
    data = payload if where == "top" else {**legit_snapshot(), "segments": [{"blocks": [payload]}]}
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(data))
    with pytest.raises(UnsafeSnapshotError, match=r"asks to load posix\.system .*--trust"):
        load_snapshot(path)
    assert not marker.exists()


def test_other_globals_are_refused_too(tmp_path):
    path = tmp_path / "ordered.pickle"
    from collections import OrderedDict

    path.write_bytes(pickle.dumps(OrderedDict(segments=[])))
    with pytest.raises(UnsafeSnapshotError, match="collections.OrderedDict"):
        load_snapshot(path)
    assert load_snapshot(path, trust=True)["segments"] == []  # trusted: a plain pickle load


def test_a_real_shaped_snapshot_loads_with_and_without_trust(tmp_path):
    snapshot = legit_snapshot()
    path = tmp_path / "rank0.step8.memory_snapshot.pickle"
    path.write_bytes(pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))
    assert load_snapshot(path) == snapshot
    assert load_snapshot(path, trust=True) == snapshot
    assert load_snapshot(path)["segments"][0]["segment_pool_id"] == (0, 0)  # tuples are plain data
    packed = tmp_path / "snap.pickle.gz"
    packed.write_bytes(gzip.compress(pickle.dumps(snapshot, protocol=2)))
    assert load_snapshot(packed) == snapshot
    assert find_snapshot_files(tmp_path) == [path, packed]


@pytest.mark.parametrize(("content", "message"), [
    (b"", "not a readable pickle"),
    (pickle.dumps({"segments": []})[:-5], "not a readable pickle"),
    (b"\x80\x05garbage", "not a readable pickle"),
    (pickle.dumps([1, 2, 3]), "not a CUDA memory snapshot"),
    (pickle.dumps({"segments": [], "device_traces": {"0": []}}), "not a list of lists"),
    (pickle.dumps({"segments": [3]}), "a segment is not a dict"),
    (gzip.compress(b"not a pickle at all", mtime=0), "not a readable pickle"),
    (b"\x1f\x8bnot really gzip", "Cannot read"),
])
def test_a_corrupt_or_foreign_file_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad.pickle"
    path.write_bytes(content)
    with pytest.raises(SnapshotError, match=message):
        load_snapshot(path)


def test_a_missing_file_is_a_snapshot_error(tmp_path):
    with pytest.raises(SnapshotError, match="Cannot read"):
        load_snapshot(tmp_path / "nope.pickle")
    with pytest.raises(SnapshotError, match="does not exist"):
        find_snapshot_files(tmp_path / "nope")
