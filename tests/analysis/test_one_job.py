"""A folder is one job's ranks: empty files are skipped like any file that is no trace, and
traces that cannot be one job are refused in one sentence (docs/traces.md, "Folders")."""

from __future__ import annotations

import gzip
import warnings

import pytest

import trainprof
from trainprof.analysis.job.one_job import JOB_START_SPREAD_S
from trainprof.cli import main
from trainprof.errors import TraceError

from helpers.paths import BERT, GPU_METRICS, NCCL_TRACE
from helpers.tracegen import TraceBuilder


def test_an_empty_file_is_skipped_like_a_file_that_is_no_trace(tmp_path):
    (tmp_path / "worker0.json").symlink_to(GPU_METRICS)
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "empty.json.gz").write_bytes(gzip.compress(b""))
    (tmp_path / "blank.json").write_bytes(b"  \n")
    (tmp_path / "settings.json").write_text('{"lr": 0.1}')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = trainprof.analyze(tmp_path, workers=1)
    skipped = sorted(str(w.message) for w in caught if "skipped" in str(w.message))
    assert [r.path.name for r in analysis.ranks] == ["worker0.json"]
    assert skipped == sorted([f"{tmp_path / 'blank.json'} is empty; skipped.",
                              f"{tmp_path / 'empty.json'} is empty; skipped.",
                              f"{tmp_path / 'empty.json.gz'} is empty; skipped.",
                              f"{tmp_path / 'settings.json'} is JSON but not a trace: it has no "
                              "'traceEvents' list; skipped."])
    # Named on its own, an empty file is still an error of one sentence.
    with pytest.raises(TraceError, match="empty.json is empty"):
        trainprof.analyze(tmp_path / "empty.json")


def test_a_ddp_trace_and_an_unrelated_inference_trace_are_not_one_job(tmp_path, capsys):
    """The real 2×A100 DDP rank beside the real H100 BERT inference trace: on main, a
    "2-rank job" with a slowest and a fastest rank; now refused, naming both files."""
    (tmp_path / NCCL_TRACE.name).symlink_to(NCCL_TRACE)
    (tmp_path / BERT.name).symlink_to(BERT)
    assert main(["analyze", str(tmp_path), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    err = captured.err
    assert err.startswith("trainprof: The traces were recorded on different devices (")
    assert f"NVIDIA A100-PG509-200: {NCCL_TRACE.name}" in err
    assert f"NVIDIA H100 80GB HBM3: {BERT.name}" in err
    assert "cannot be the ranks of one job" in err


def rank(n: int | None, world: int | None = 8, at_s: float = 0.0, device: str | None = None
         ) -> TraceBuilder:
    b = TraceBuilder(base=1.7e15 + at_s * 1e6)  # µs since the epoch, as Kineto writes them
    if n is not None:
        b.metadata["distributedInfo"] = {"rank": n, "world_size": world, "backend": "nccl"}
    if device is not None:
        b.metadata["deviceProperties"] = [{"id": 0, "name": device, "numSms": 132}]
    b.step(1, 0, 1000)
    b.launch(10, 5, k_ts=100, k_dur=300)
    return b


@pytest.mark.parametrize(("files", "says"), [
    ({"a.json": rank(0, world=2), "b.json": rank(1, world=8)},
     "The traces record different world sizes (2: a.json; 8: b.json)"),
    ({"a.json": rank(0, world=2), "b.json": rank(1, world=2), "c.json": rank(2, world=2)},
     "The folder holds 3 ranks but the traces record a world size of 2"),
    ({"run1.json": rank(None), "run2.json": rank(None)},
     "2 traces name no rank (no distributedInfo, no rank in the file name: run1.json, "
     "run2.json)"),
    ({"rank0.json": rank(0), "rank1.json": rank(1, at_s=JOB_START_SPREAD_S + 60)},
     "The recordings of rank 0 (rank0.json) and rank 1 (rank1.json) start 11 minutes apart"),
    ({"rank0.json": rank(0, device="AMD Instinct MI300X"),
      "rank1.json": rank(1, device="NVIDIA H100 80GB HBM3")},
     "The traces were recorded on different devices (AMD Instinct MI300X: rank0.json; "
     "NVIDIA H100 80GB HBM3: rank1.json)"),
], ids=["world sizes", "more ranks than the world", "no rank", "start times", "devices"])
def test_traces_that_cannot_be_one_job_are_refused(tmp_path, files, says):
    for name, builder in files.items():
        builder.write(tmp_path / name)
    with pytest.raises(TraceError) as err:
        trainprof.analyze(tmp_path, workers=1)
    assert str(err.value).startswith(says), str(err.value)


def test_the_ranks_of_one_job_still_make_one(tmp_path):
    """Same world size, ranks started seconds apart, one rank-less window beside them, a
    device without properties ("GPU 0") beside a named one: one job of three ranks."""
    rank(0, at_s=0.0, device="NVIDIA H100 80GB HBM3").write(tmp_path / "rank0.json")
    rank(1, at_s=5.0).write(tmp_path / "rank1.json")
    rank(None, at_s=9.0).write(tmp_path / "trace.json")
    analysis = trainprof.analyze(tmp_path, workers=1)
    assert [r.rank for r in analysis.ranks] == [0, 1, 2]
    assert any("name no rank" in note for note in analysis.notes)
