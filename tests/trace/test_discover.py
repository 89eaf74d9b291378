"""Ranks and windows: from distributedInfo, from file names, or numbered with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

import trainprof
from trainprof.errors import TraceError
from trainprof.trace.discover import parse_name

from helpers.paths import RESNET_W0, RESNET_W0_SPAN2, TRACE_FILTER
from helpers.tracegen import TraceBuilder


@pytest.mark.parametrize(
    "name, rank, window",
    [
        ("rank-3.json", 3, None),
        ("rank3.json.gz", 3, None),
        ("rank_3.pt.trace.json", 3, None),
        ("profile_3.json", 3, None),  # accelerate
        ("rank3_trace.json.gz", 3, None),  # torchtitan
        ("worker2.1623143089861.pt.trace.json.gz", 2, 1623143089861),  # tensorboard handler
        ("rank1.step12.pt.trace.json.gz", 1, 12),  # trainprof.profile
        ("myhost_12345.1700000000000.pt.trace.json", None, 1700000000000),
        ("sampled_rank-1.json.gz", 1, None),
        ("trace.json", None, None),
        ("prank9.json", None, None),
        ("iteration_20/rank3_trace.json", 3, 20),  # torchtitan: one folder per window
        ("iteration_x/rank3_trace.json", 3, None),
    ],
)
def test_rank_and_window_from_file_names(name, rank, window):
    parsed = parse_name(Path(name))
    assert parsed.rank == rank and parsed.window_token == window


def tiny(path: Path, rank: int | None = None) -> Path:
    b = TraceBuilder()
    if rank is not None:
        b.metadata["distributedInfo"] = {"rank": rank, "world_size": 8}
    b.step(1, 0, 100)
    b.op("aten::add", 0, 50)
    return b.write(path)


def test_distributed_info_wins_over_the_name(tmp_path):
    tiny(tmp_path / "rank-0.json", rank=5)
    tiny(tmp_path / "rank-1.json", rank=4)
    assert [r.rank for r in trainprof.analyze(tmp_path).ranks] == [4, 5]


def test_unnamed_files_get_distinct_ranks_with_a_warning(tmp_path):
    tiny(tmp_path / "a.json")
    tiny(tmp_path / "b.json")
    tiny(tmp_path / "rank0.json")
    with pytest.warns(UserWarning, match="name no rank"):
        traces = trainprof.load(tmp_path)
    assert sorted(t.rank for t in traces) == [0, 1, 2]
    assert {t.path.name: t.rank for t in traces}["rank0.json"] == 0


def test_two_files_claiming_one_rank_is_an_error_naming_both(tmp_path):
    tiny(tmp_path / "x" / "rank-2.json")
    tiny(tmp_path / "y" / "trace.json", rank=2)
    with pytest.raises(TraceError) as err:
        trainprof.analyze(tmp_path)
    assert "rank-2.json" in str(err.value) and "trace.json" in str(err.value)


def test_windows_of_one_worker_are_kept_apart(tmp_path):
    for src in (RESNET_W0, RESNET_W0_SPAN2):
        (tmp_path / src.name).symlink_to(src)
    analysis = trainprof.analyze(tmp_path)
    assert [(r.rank, r.window) for r in analysis.ranks] == [(0, 0), (0, 1)]
    first, second = analysis.ranks
    assert [s["step"] for s in first.steps.per_step] == [5, 6, 7, 8, 9, 10]
    assert [s["step"] for s in second.steps.per_step][0] == 16
    assert first.steps.mean_ms == pytest.approx(177.6, abs=0.1)
    assert second.steps.mean_ms == pytest.approx(154.9, abs=0.1)


def test_torchtitan_iteration_folders_are_windows_of_each_rank(tmp_path):
    for iteration in (10, 20):
        for rank in (0, 1):
            tiny(tmp_path / f"iteration_{iteration}" / f"rank{rank}_trace.json")
    analysis = trainprof.analyze(tmp_path, workers=1)
    placed = [(r.rank, r.window, r.path.parent.name) for r in analysis.ranks]
    assert placed == [(0, 0, "iteration_10"), (0, 1, "iteration_20"),
                      (1, 0, "iteration_10"), (1, 1, "iteration_20")]


def test_two_rank_folder():
    analysis = trainprof.analyze(TRACE_FILTER)
    assert [r.rank for r in analysis.ranks] == [0, 1]
    assert analysis.ranks[0].environment["world_size"] == 128
