"""`trainprof.bench.checklist`: each phase timed on its own, shares judged against the ranges."""

from __future__ import annotations

import msgspec
import pytest
import torch
from torch import nn

import trainprof.bench as bench
from trainprof.bench.health import HEALTHY_PCT, PHASES, judge
from trainprof.bench.render import print_checklist, to_json
from trainprof.errors import BenchError

from bench_helpers import (
    TinyParams,
    adam,
    loader,
    one_thread,  # noqa: F401 (an autouse fixture)
    small_batch,
    small_mlp,
)

LOSS = nn.CrossEntropyLoss()
QUICK = {"loss_fn": LOSS, "device": "cpu", "min_run_time_s": 0.1, "warmup": 1}
METHOD = {"timer": "test"}


@pytest.mark.slow
def test_a_slow_data_loader_is_flagged_as_data_loading():
    check = bench.checklist(small_mlp, loader=loader(delay_s=0.002), **QUICK)
    data = check.phase("data")
    assert data.status == "high" and data.flagged
    assert data.rule == "data_loading"
    assert data.to_dict()["docs"] == "docs/rules.md#data-loading"
    assert [p.phase for p in check.flagged()][0] == "data"
    assert check.phase("optimizer").rule is None


@pytest.mark.slow
def test_a_per_tensor_optimizer_is_flagged_as_optimizer_overhead():
    check = bench.checklist(TinyParams, small_batch, make_optimizer=adam, **QUICK)
    optimizer = check.phase("optimizer")
    assert optimizer.status == "high" and optimizer.rule == "optimizer_overhead"
    assert not check.phase("data").flagged  # the batch is made once, in memory
    assert check.method["backward"] == "one graph, retain_graph=True"
    assert check.method["timer"] == "torch.utils.benchmark.Timer.blocked_autorange"


@pytest.mark.slow
def test_json_gives_phase_shares_that_add_up():
    check = bench.checklist(small_mlp, small_batch, **QUICK)
    data = msgspec.json.decode(to_json(check))
    assert data["schema"] == "trainprof.checklist/1"
    assert set(data["phases_pct"]) == set(PHASES) == set(data["phases_ms"])
    assert sum(data["phases_pct"].values()) == pytest.approx(100.0)
    assert data["step_ms"] == pytest.approx(sum(data["phases_ms"].values()))
    assert all(ms > 0 for ms in data["phases_ms"].values())
    assert data["flagged"] == [p["phase"] for p in data["phases"] if p["flagged"]]
    assert data["healthy_pct"]["forward"] == [30.0, 40.0]


def test_shares_inside_the_ranges_flag_nothing():
    check = judge({"data": 4, "forward": 38, "backward": 48, "optimizer": 10}, "cpu", METHOD)
    assert [p.status for p in check.phases] == ["ok", "ok", "ok", "ok"]
    assert check.flagged() == []


def test_which_side_of_a_range_is_flagged():
    check = judge({"data": 1, "forward": 20, "backward": 60, "optimizer": 19}, "cpu", METHOD)
    status = {p.phase: (p.status, p.flagged, p.rule) for p in check.phases}
    assert status == {
        "data": ("ok", False, None),        # a loader that keeps up costs nothing
        "forward": ("low", True, None),
        "backward": ("high", True, None),
        "optimizer": ("high", True, "optimizer_overhead"),
    }
    assert check.phase("backward").advice.startswith("backward takes more")


def test_every_phase_has_a_range_and_advice_out_of_it():
    for phase in PHASES:
        low, high = HEALTHY_PCT[phase]
        assert 0 <= low < high < 100
        for pct in ([high + 1] if low == 0 else [low / 2, high + 1]):
            shares = dict.fromkeys(PHASES, 1.0) | {phase: pct}
            assert judge(shares, "cpu", METHOD).phase(phase).advice


def test_the_text_report_shows_ranges_and_the_rule():
    from rich.console import Console

    check = judge({"data": 60, "forward": 15, "backward": 20, "optimizer": 5}, "cpu", METHOD)
    console = Console(record=True, width=120)
    print_checklist(check, console)
    text = console.export_text()
    assert "0-5%" in text and "data_loading" in text and "docs/rules.md#data-loading" in text


def test_bad_settings_raise_bench_error():
    with pytest.raises(BenchError, match="min_run_time_s"):
        bench.checklist(small_mlp, small_batch, loss_fn=LOSS, min_run_time_s=0)


def test_a_workload_that_cannot_train_is_bad_input():
    with pytest.raises(BenchError, match=r"cannot train this workload \(RuntimeError: mat1 and mat2"):
        bench.checklist(small_mlp, lambda: (torch.randn(2, 3), torch.zeros(2).long()), **QUICK)


@pytest.mark.parametrize(("data", "optimizer"), [(4.9, 14.9), (5.1, 15.1), (7.0, 12.0), (30, 40)])
def test_data_and_optimizer_are_flagged_where_their_rules_fire(data, optimizer):
    """No second opinion: the checklist flags data and the optimizer exactly where the
    data_loading (5%) and optimizer_overhead (15%) rules fire on a recorded trace."""
    rest = (100 - data - optimizer) / 2
    check = judge({"data": data, "forward": rest, "backward": rest, "optimizer": optimizer},
                  "cpu", METHOD)
    assert (check.phase("data").rule == "data_loading") == (data > 5.0)
    assert (check.phase("optimizer").rule == "optimizer_overhead") == (optimizer > 15.0)
