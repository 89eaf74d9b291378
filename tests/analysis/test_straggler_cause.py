"""What makes the straggler late: synthetic GPU ranks, each with one known cause."""

from __future__ import annotations

import pytest

import trainprof

from rank_scenarios import gpu_rank


@pytest.mark.parametrize("cause", ["data loading", "compute", "host"])
def test_the_straggler_is_named_with_its_cause(tmp_path, cause):
    gpu_rank(0).write(tmp_path / "rank0.json")
    gpu_rank(1, {cause: 400}).write(tmp_path / "rank1.json")
    gpu_rank(2).write(tmp_path / "rank2.json")
    analysis = trainprof.analyze(tmp_path)
    job = analysis.job.stragglers
    assert job.straggler == 1
    assert job.cause is not None and job.cause.reason == cause
    assert job.cause.excess_ms > 0.2  # at least half the 0.4 ms it makes the others wait
    assert f"the cause is its {cause}" in job.evidence[-1]
    finding = next(f for f in analysis.findings if f.id == "straggler")
    assert f"held back by its {cause}" in finding.title
    assert any(e.what.startswith(f"the cause: its {cause}") for e in finding.evidence)
    assert job.to_dict()["cause"]["reason"] == cause


def test_no_cause_when_no_one_part_explains_the_lateness(tmp_path):
    """Rank 1 is late by a little of everything: no part explains half the wait it causes."""
    gpu_rank(0).write(tmp_path / "rank0.json")
    gpu_rank(1, {"data loading": 150, "compute": 150, "host": 100}).write(tmp_path / "rank1.json")
    gpu_rank(2).write(tmp_path / "rank2.json")
    analysis = trainprof.analyze(tmp_path)
    job = analysis.job.stragglers
    assert job.straggler == 1 and job.cause is None
    assert not any("the cause" in e for e in job.evidence)
    finding = next(f for f in analysis.findings if f.id == "straggler")
    assert "held back" not in finding.title
