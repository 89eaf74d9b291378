"""The typed step statistics and section containers keep the JSON result's shape."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from trainprof.analysis.overview.steps import StepStats, StepWindows, step_stats
from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.analysis.sections.registry import JOB_SECTIONS, SECTIONS

JSON_STEP_KEYS = ["count", "mean_ms", "median_ms", "p90_ms", "min_ms", "max_ms", "cv", "per_step",
                  "slow_steps", "slow_episodes", "slow_excess_ms", "slow_period"]


def test_every_registered_section_has_its_field_in_order():
    assert [name for name, _ in SECTIONS] == RankSections.field_names()
    assert [name for name, _ in JOB_SECTIONS] == JobSections.field_names()


def test_step_stats_json_keys_values_and_round_trip():
    ms = [10.0, 12.0, 11.0, 30.0, 10.0]
    ends = np.cumsum(np.array(ms) * 1000.0)
    w = StepWindows(np.arange(5, 10), np.concatenate([[0.0], ends[:-1]]), ends, "ProfilerStep")
    s = step_stats(w)
    d = s.to_dict()
    assert list(d) == JSON_STEP_KEYS
    assert d["per_step"] == [{"step": 5 + i, "ms": pytest.approx(m)} for i, m in enumerate(ms)]
    assert (d["count"], d["min_ms"], d["max_ms"]) == (5, pytest.approx(10.0), pytest.approx(30.0))
    assert d["mean_ms"] == pytest.approx(sum(ms) / 5) and d["median_ms"] == pytest.approx(11.0)
    assert d["slow_steps"] == [8]  # 30 ms against a median of 11
    assert StepStats.from_dict({**d, "source": "ProfilerStep"}) == s


def test_no_steps_are_the_defaults():
    empty = StepWindows(np.array([], dtype=np.int64), np.array([]), np.array([]), "ProfilerStep")
    assert step_stats(empty) == StepStats()
    assert StepStats().to_dict() == {
        "count": 0, "mean_ms": 0.0, "median_ms": 0.0, "p90_ms": 0.0, "min_ms": 0.0,
        "max_ms": 0.0, "cv": 0.0, "per_step": [], "slow_steps": [], "slow_episodes": 0,
        "slow_excess_ms": 0.0, "slow_period": None}


class _Result(msgspec.Struct):
    """A section's stand-in: a Struct with its own JSON, as every section's record is."""

    tag: str

    def to_dict(self) -> dict[str, str]:
        return {"tag": self.tag}


def test_sections_iterate_present_ones_in_registry_order():
    sections = RankSections(critical_path=_Result("cp"), idle=_Result("idle"))
    assert sections.names() == ["idle", "critical_path"]
    assert sections.to_dict() == {"idle": {"tag": "idle"}, "critical_path": {"tag": "cp"}}
    assert RankSections().items() == [] and JobSections().to_dict() == {}


def test_sections_by_name_as_when_they_were_a_dict():
    idle = _Result("idle")
    sections = RankSections(idle=idle)
    assert sections["idle"] is idle and "idle" in sections
    assert "kernels" not in sections and "nonsense" not in sections
    for missing in ("kernels", "nonsense", "items"):
        with pytest.raises(KeyError):
            sections[missing]


def test_a_diffs_json_lists_its_top_changes_and_the_old_argument_warns():
    """``with_top(n)`` sets how many changed ops and kernels the JSON lists (ours: the slices
    of the full lists); ``to_dict(top=n)``, the old way, warns and gives the same."""
    import warnings

    from trainprof.analysis.deltas import Delta, NameDelta, TraceDiff

    ops = [NameDelta(f"op{i}", "slower", 1.0, 1.0, float(i), float(2 * i)) for i in range(12)]
    d = TraceDiff(Delta(1.0, 2.0), {}, {}, ops, ops[:3], "host self")
    assert [o["name"] for o in d.with_top(5).to_dict()["ops"]] == [o.name for o in ops[:5]]
    assert len(d.to_dict()["ops"]) == 12 and len(d.with_top(2).to_dict()["kernels"]) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert d.to_dict(top=5) == d.with_top(5).to_dict()
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
