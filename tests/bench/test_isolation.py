"""`isolate=True`: each strategy in its own process; a crash or a hang spoils only its row."""

from __future__ import annotations

import pytest
from torch import nn

import trainprof.bench as bench
from trainprof.bench.strategies import Strategy
from trainprof.errors import BenchError

from bench_helpers import (
    BATCH,
    crash,
    hang,
    loader,
    one_thread,  # noqa: F401 (an autouse fixture)
    small_batch,
    small_mlp,
)

pytestmark = pytest.mark.slow  # each strategy starts a Python process that imports torch

LOSS = nn.CrossEntropyLoss()


def test_a_crashing_strategy_does_not_stop_the_others():
    crasher = Strategy("segfault", "crashes its process", prepare_model=crash)
    result = bench.compare(["fp32", crasher, "batch2x+workers1"], small_mlp, loader=loader(),
                           loss_fn=LOSS, steps=3, warmup=1, repeats=1, device="cpu",
                           isolate=True)
    crashed = result.row("segfault")
    assert crashed.status == "failed"
    assert crashed.reason == "crashed (SIGSEGV) (in its own process)"
    assert result.row("fp32").ok
    both = result.row("batch2x+workers1")  # DataLoader workers start inside the child
    assert both.ok, both.reason
    assert both.samples_per_step == 2 * BATCH
    assert result.row("fp32").peak_memory_bytes > 0  # the child's own peak
    assert result.settings["isolate"] is True


def test_a_hanging_strategy_is_stopped_at_the_timeout():
    sleeper = Strategy("hang", "never finishes", prepare_model=hang)
    result = bench.compare([sleeper], small_mlp, small_batch, loss_fn=LOSS, steps=1, warmup=0,
                           repeats=1, device="cpu", isolate=True, timeout_s=4)
    assert result.row("hang").status == "failed"
    assert result.row("hang").reason == "took longer than 4 s and was stopped (in its own process)"


def test_a_workload_that_cannot_travel_is_bad_input():
    with pytest.raises(BenchError, match="importable"):
        bench.compare(["fp32"], lambda: nn.Linear(4, 2), small_batch, loss_fn=LOSS, steps=1,
                      repeats=1, device="cpu", isolate=True)
