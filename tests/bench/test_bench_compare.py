"""`trainprof.bench.compare`: real CPU training runs, short; known effects come out in order."""

from __future__ import annotations

import msgspec
import pytest
from torch import nn
from torch.utils.data import DataLoader

import trainprof.bench as bench
from trainprof.bench.render import print_bench, to_json
from trainprof.bench.strategies import Strategy
from trainprof.errors import BenchError

from bench_helpers import (
    BATCH,
    BIG_BUFFER_BYTES,
    SEQ,
    Samples,
    TinyParams,
    TokenModel,
    adam,
    broken,
    hold_big_buffer,
    loader,
    one_thread,  # noqa: F401 (an autouse fixture)
    rmsprop,
    small_batch,
    small_mlp,
    token_batch,
)

pytestmark = pytest.mark.slow  # every test here trains, if only for a few steps
LOSS = nn.CrossEntropyLoss()
#: What every strategy row has in the JSON (docs/bench.md).
ROW_KEYS = {"name", "description", "status", "skipped", "failed", "reason", "samples_per_s",
            "samples_per_s_std", "samples_per_s_min", "samples_per_s_max",
            "repeat_samples_per_s", "tokens_per_s", "relative_to_baseline", "samples_per_step",
            "steps_timed", "step_ms", "phases_ms", "peak_memory_bytes"}


def quick(strategies, **kwargs):
    kwargs.setdefault("make_model", small_mlp)
    if "loader" not in kwargs:
        kwargs.setdefault("make_batch", small_batch)
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("recheck", False)
    return bench.compare(strategies, loss_fn=LOSS, steps=kwargs.pop("steps", 8), warmup=2,
                         repeats=kwargs.pop("repeats", 2), **kwargs)


def test_a_larger_batch_raises_samples_per_second():
    result = quick(["fp32", "batch8x"])
    base, big = result.row("fp32"), result.row("batch8x")
    assert (base.samples_per_step, big.samples_per_step) == (BATCH, 8 * BATCH)
    assert big.samples_per_s > base.samples_per_s
    assert big.relative_to_baseline > 1 and base.relative_to_baseline == 1
    assert result.fastest() is big


def test_foreach_and_fused_shorten_the_optimizer_phase_over_many_small_tensors():
    result = bench.compare(["for-loop", "foreach", "fused"], TinyParams, small_batch,
                           loss_fn=LOSS, make_optimizer=adam, steps=6, warmup=2, repeats=2,
                           device="cpu")
    optimizer_ms = {r.name: r.phases_ms["optimizer"] for r in result.strategies}
    assert all(r.ok for r in result.strategies), [r.reason for r in result.strategies]
    assert optimizer_ms["foreach"] < optimizer_ms["for-loop"]
    assert optimizer_ms["fused"] < optimizer_ms["for-loop"]
    assert result.baseline == "for-loop"  # no fp32 here: the first strategy


def test_strategies_that_do_not_apply_on_the_cpu_say_why():
    result = quick(["fp32", "fp16", "compile-reduce-overhead", "pinned", "channels-last",
                    "workers"], steps=2, repeats=1)
    reasons = {r.name: r.reason for r in result.strategies if r.status == "skipped"}
    assert set(reasons) == {"fp16", "compile-reduce-overhead", "pinned", "channels-last",
                            "workers"}
    assert "CUDA" in reasons["fp16"] and "CUDA graphs" in reasons["compile-reduce-overhead"]
    assert "GPU" in reasons["pinned"] and "convolution" in reasons["channels-last"]
    assert "loader" in reasons["workers"]
    rows = {row["name"]: row for row in msgspec.json.decode(to_json(result))["strategies"]}
    assert rows["fp16"]["skipped"] and rows["fp16"]["samples_per_s"] is None
    assert rows["fp16"]["relative_to_baseline"] is None
    assert not rows["fp32"]["skipped"] and rows["fp32"]["reason"] is None


def test_an_optimizer_without_the_implementation_is_skipped():
    result = quick(["fp32", "fused"], make_optimizer=rmsprop, steps=2, repeats=1)
    assert result.row("fused").status == "skipped"
    assert result.row("fused").reason == "RMSprop has no fused= implementation"


def test_a_failing_strategy_gets_a_row_and_the_others_still_run():
    result = quick(["fp32", Strategy("broken", "raises", prepare_model=broken), "accum4"],
                   steps=4, repeats=1)
    failed = result.row("broken")
    assert failed.status == "failed"
    assert failed.reason == "ValueError: this strategy is broken on purpose"
    assert result.row("accum4").ok and result.row("fp32").ok


def test_accumulation_steps_cover_several_batches():
    result = quick(["accum4"], steps=8, repeats=2)
    row = result.row("accum4")
    assert row.samples_per_step == 4 * BATCH
    assert len(row.step_times_ms) == 2 * 2  # 8 batches a repeat: 2 optimizer steps, 2 repeats
    assert len(row.repeat_samples_per_s) == 2


def test_a_rebuilt_loader_gets_the_strategy_batch_size_and_workers():
    result = quick(["fp32", "batch2x", "workers1"], loader=loader(), steps=3, repeats=1)
    assert [r.status for r in result.strategies] == ["ok", "ok", "ok"]
    assert result.row("batch2x").samples_per_step == 2 * BATCH


def test_peak_memory_is_measured_per_strategy():
    ballast = Strategy("ballast", "holds a big buffer", prepare_model=hold_big_buffer)
    result = quick([ballast, "fp32"], steps=2, repeats=1)
    heavy, light = result.row("ballast").peak_memory_bytes, result.row("fp32").peak_memory_bytes
    assert heavy is not None and light is not None
    # fp32 ran after the ballast was freed: its peak starts again from there
    assert heavy - light > BIG_BUFFER_BYTES // 2


def test_json_keeps_the_contract():
    result = quick(["fp32", "fp16", "batch2x"], steps=3, repeats=2, recheck=True)
    data = msgspec.json.decode(to_json(result))
    assert data["schema"] == "trainprof.bench/1" and data["baseline"] == "fp32"
    assert data["settings"] == {"steps": 3, "warmup": 2, "repeats": 2, "isolate": False,
                                "timeout_s": None, "seed": 0, "recheck": True}
    again = data["baseline_again"]
    assert again["samples_per_s"] > 0
    assert again["drift_pct"] == pytest.approx(
        100 * (again["samples_per_s"] / data["strategies"][0]["samples_per_s"] - 1))
    for row in data["strategies"]:
        assert set(row) == ROW_KEYS
    fp32 = data["strategies"][0]
    assert set(fp32["step_ms"]) == {"median", "p90", "mean", "min", "max"}
    assert fp32["step_ms"]["min"] <= fp32["step_ms"]["median"] <= fp32["step_ms"]["p90"]
    assert fp32["samples_per_s_min"] <= fp32["samples_per_s"] <= fp32["samples_per_s_max"]
    assert set(fp32["phases_ms"]) == {"data", "forward", "backward", "optimizer", "other"}
    assert fp32["steps_timed"] == 6 and fp32["peak_memory_bytes"] > 0


def test_the_text_report_names_every_strategy(capsys):
    from rich.console import Console

    result = quick(["fp32", "fp16", "batch2x"], steps=2, repeats=1)
    console = Console(record=True, width=120)
    print_bench(result, console)
    text = console.export_text()
    assert "samples/s" in text and "batch2x" in text
    assert "skipped fp16: fp16 with a GradScaler is for CUDA GPUs" in text
    assert "Fastest:" in text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"steps": 0}, "steps must be an integer of at least 1"),
    ({"repeats": 1.5}, "repeats must be an integer"),
    ({"baseline": "bf16"}, "baseline 'bf16' is not among"),
    ({"timeout_s": 5}, "timeout_s needs isolate=True"),
    ({"device": "cuda"}, "no CUDA GPU"),
    ({"device": "potato"}, "unknown device"),
])
def test_bad_arguments_raise_bench_error(kwargs, message):
    with pytest.raises(BenchError, match=message):
        quick(["fp32"], **kwargs)


def test_a_workload_needs_exactly_one_source_of_batches():
    with pytest.raises(BenchError, match="exactly one source"):
        bench.compare(["fp32"], small_mlp, small_batch, loader=loader())
    with pytest.raises(BenchError, match="make_model"):
        bench.compare(["fp32"], make_batch=small_batch)


def test_compile_runs_and_the_step_timer_sees_its_phases():
    result = quick(["compile"], steps=3, repeats=1)  # a tiny model: seconds to compile
    row = result.row("compile")
    assert row.ok, row.reason
    assert row.phases_ms["forward"] > 0 and row.phases_ms["backward"] > 0
    assert len(row.step_times_ms) == 3


def test_a_loader_that_batches_its_own_way_is_used_as_it_is():
    batches = [list(range(i, i + BATCH)) for i in range(0, 64, BATCH)]
    own = DataLoader(Samples(64), batch_sampler=batches)
    result = quick(["fp32", "batch2x"], loader=own, steps=3, repeats=1)
    assert result.row("fp32").ok and result.row("fp32").samples_per_step == BATCH
    assert result.row("batch2x").status == "skipped"
    assert "batches in its own way" in result.row("batch2x").reason


def test_tokens_per_second_with_a_sequence_dimension():
    result = bench.compare(["fp32"], TokenModel, token_batch, seq_dim=1, steps=4, warmup=1,
                           repeats=1, device="cpu", recheck=False)  # the model returns its loss
    row = result.row("fp32")
    assert row.ok, row.reason
    assert row.tokens_per_s == pytest.approx(SEQ * row.samples_per_s)
