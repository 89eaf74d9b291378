"""The benchmark's result: relative speeds, spread, drift, and what the report says of them."""

from __future__ import annotations

import pytest
from rich.console import Console

from trainprof.bench.render import print_bench
from trainprof.bench.results import BenchResult, StrategyResult, set_relative_speeds

SETTINGS = {"steps": 2, "warmup": 1, "repeats": 3, "isolate": False}


def row(name, rates, status="ok"):
    return StrategyResult(name, name, status, None if status == "ok" else "why",
                          samples_per_step=8, repeat_samples_per_s=rates,
                          step_times_ms=[10.0, 12.0, 30.0] if rates else [])


def result(rows, again=None):
    set_relative_speeds(rows, "fp32")
    return BenchResult(rows, "fp32", "cpu", SETTINGS, {"threads": 1, "device_name": "test"},
                       baseline_again_samples_per_s=again)


def text_of(bench):
    console = Console(record=True, width=140)
    print_bench(bench, console)
    return console.export_text()


def test_headline_is_the_median_repeat_and_the_spread_is_kept():
    r = row("fp32", [100.0, 400.0, 110.0])
    assert r.samples_per_s == 110.0
    d = r.to_dict()
    assert (d["samples_per_s_min"], d["samples_per_s_max"]) == (100.0, 400.0)
    assert d["samples_per_s_std"] == pytest.approx(170.39, abs=0.01)  # sample std of the three
    assert d["step_ms"]["median"] == 12.0 and d["step_ms"]["p90"] == pytest.approx(26.4)


def test_relative_speeds_need_a_baseline_that_ran():
    rows = [row("fp32", [], status="failed"), row("bf16", [200.0])]
    result(rows)
    assert [r.relative_to_baseline for r in rows] == [None, None]
    rows = [row("fp32", [100.0]), row("bf16", [250.0]), row("fp16", [], status="skipped")]
    bench = result(rows)
    assert [r.relative_to_baseline for r in rows] == [1.0, 2.5, None]
    assert bench.fastest().name == "bf16"
    skipped = bench.to_dict()["strategies"][2]
    assert skipped["skipped"] and skipped["step_ms"] is None and skipped["repeat_samples_per_s"] == []


def test_a_clear_lead_and_one_within_the_spread():
    clear = text_of(result([row("fp32", [100.0, 101.0]), row("bf16", [150.0, 160.0])]))
    assert "every repeat faster than every baseline repeat" in clear
    noisy = text_of(result([row("fp32", [100.0, 140.0]), row("bf16", [130.0, 160.0])]))
    assert "within the repeats' spread" in noisy


def test_drift_of_the_baseline_is_reported():
    steady = result([row("fp32", [100.0]), row("bf16", [150.0])], again=104.0)
    assert steady.drift_pct == pytest.approx(4.0) and not steady.drifted
    assert "within 10%" in text_of(steady)
    slowed = result([row("fp32", [100.0]), row("bf16", [150.0])], again=50.0)
    assert slowed.drift_pct == pytest.approx(-50.0) and slowed.drifted
    assert "the machine's speed changed during the run" in text_of(slowed)
    assert slowed.to_dict()["baseline_again"] == {"samples_per_s": 50.0, "drift_pct": -50.0,
                                                  "drifted": True}


def test_a_lead_smaller_than_the_drift_is_not_called_clear():
    rows = [row("fp32", [100.0, 101.0]), row("fused", [105.0, 106.0])]
    text = text_of(result(rows, again=93.0))
    assert "less than the baseline's own change during the run (-7%)" in text
    assert "every repeat faster" not in text
