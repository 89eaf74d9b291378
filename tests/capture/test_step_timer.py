"""`trainprof.StepTimer` on real CPU training: phases from hooks, throughput, FLOPs, outputs."""

from __future__ import annotations

import gc
import json
import logging
import os
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import trainprof
from trainprof.capture.safety import RecordingWarning
from trainprof.capture.steps import PHASES

from capture_helpers import TinyTraining

SLEEP_S = 0.02  # long enough to dwarf a tiny step on a busy machine, short enough for 5 steps
SLEEP_MS = SLEEP_S * 1e3


class SlowDataset(torch.utils.data.Dataset):
    """Eight samples per batch; each batch takes SLEEP_S to produce."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int):
        if index % 8 == 0:
            time.sleep(SLEEP_S)
        return torch.randn(16), index % 4


def loop(training, timer, loader):
    for x, y in timer.wrap(loader):
        training.step(x, y)


def batches(n: int, size: int = 8, seq: int | None = None):
    shape = (size, 16) if seq is None else (size, seq, 16)
    return [(torch.randn(*shape), torch.randint(0, 4, (size,))) for _ in range(n)]


def test_a_slow_loader_shows_in_the_data_phase():
    training = TinyTraining()
    timer = trainprof.StepTimer(model=training.model, optimizer=training.optimizer, log_every=None)
    loop(training, timer, torch.utils.data.DataLoader(SlowDataset(), batch_size=8))
    summary = timer.summary()
    phases = summary["phases_ms"]
    assert summary["steps"] == 5  # six batches, the first left out as warm-up
    assert phases["data"] >= SLEEP_MS
    assert phases["forward"] < SLEEP_MS / 2
    assert max(PHASES, key=phases.get) == "data"


def test_a_slow_forward_shows_in_the_forward_phase():
    training = TinyTraining()
    timer = trainprof.StepTimer(model=training.model, optimizer=training.optimizer, log_every=None)
    training.model[1].register_forward_hook(lambda *_: time.sleep(SLEEP_S))  # inside the model
    loop(training, timer, batches(4))
    phases = timer.summary()["phases_ms"]
    assert phases["forward"] >= SLEEP_MS
    assert phases["data"] < SLEEP_MS / 2
    assert phases["backward"] < SLEEP_MS / 2


def test_a_slow_backward_and_a_slow_optimizer_show_in_their_phases():
    training = TinyTraining()
    class SlowGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            time.sleep(SLEEP_S)
            return grad

    class SlowSGD(torch.optim.SGD):
        def step(self, closure=None):
            time.sleep(SLEEP_S / 2)
            return super().step(closure)

    training.model[1].register_forward_hook(lambda _m, _a, out: SlowGrad.apply(out))
    training.optimizer = SlowSGD(training.model.parameters(), lr=0.01)
    timer = trainprof.StepTimer(model=training.model, optimizer=training.optimizer, log_every=None)
    loop(training, timer, batches(4))
    phases = timer.summary()["phases_ms"]
    assert phases["backward"] >= SLEEP_MS
    assert SLEEP_MS / 2 <= phases["optimizer"] < SLEEP_MS
    assert phases["forward"] < SLEEP_MS / 2


def test_phases_add_up_to_the_step_time():
    training = TinyTraining()
    timer = trainprof.StepTimer(model=training.model, optimizer=training.optimizer, log_every=None)
    loop(training, timer, torch.utils.data.DataLoader(SlowDataset(), batch_size=8))
    summary = timer.summary()
    assert sum(summary["phases_ms"].values()) == pytest.approx(summary["step_ms"]["mean"], rel=1e-6)


def test_samples_and_tokens_per_second_from_the_batches():
    seq = 5
    model = torch.nn.Sequential(torch.nn.Linear(16, 4), torch.nn.Flatten(), torch.nn.Linear(4 * seq, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    timer = trainprof.StepTimer(model, optimizer, seq_dim=1, log_every=None)
    for x, y in timer.wrap(batches(6, size=8, seq=seq)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    summary = timer.summary()
    seconds = summary["steps"] * summary["step_ms"]["mean"] / 1e3
    assert summary["samples_per_s"] == pytest.approx(8 * summary["steps"] / seconds, rel=1e-9)
    assert summary["tokens_per_s"] == pytest.approx(summary["samples_per_s"] * seq, rel=1e-9)


def test_a_given_batch_size_wins_and_no_seq_dim_means_no_tokens():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, batch_size=3, log_every=None)
    loop(training, timer, batches(4, size=8))
    summary = timer.summary()
    seconds = summary["steps"] * summary["step_ms"]["mean"] / 1e3
    assert summary["samples_per_s"] == pytest.approx(3 * summary["steps"] / seconds)
    assert summary["tokens_per_s"] is None


def test_summary_is_a_plain_json_dict():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, peak_flops=1e12, log_every=None)
    loop(training, timer, batches(4))
    summary = timer.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert set(summary) >= {"steps", "phases_ms", "step_ms", "samples_per_s", "tokens_per_s",
                            "peak_memory_bytes", "mfu"}
    assert set(summary["phases_ms"]) == set(PHASES)
    assert set(summary["step_ms"]) == {"mean", "median", "p90", "min", "max"}
    assert summary["peak_memory_bytes"] > 10 * 2**20  # this process's peak RSS: torch alone is more


def test_flops_are_counted_once_and_give_mfu():
    training = TinyTraining()
    x, y = batches(1)[0]
    with FlopCounterMode(display=False) as expected:
        torch.nn.functional.cross_entropy(training.model(x), y).backward()
    timer = trainprof.StepTimer(training.model, training.optimizer, peak_flops=1e9, log_every=None)
    loop(training, timer, batches(5))
    summary = timer.summary()
    assert summary["flops_per_step"] == expected.get_total_flops() > 0
    assert summary["excluded_steps"] == 1  # warm-up step and counted step are the same one
    seconds = summary["steps"] * summary["step_ms"]["mean"] / 1e3
    assert summary["mfu"] == pytest.approx(summary["flops_per_step"] * summary["steps"] / seconds / 1e9)


def test_no_mfu_on_a_cpu_without_a_peak():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    loop(training, timer, batches(3))
    summary = timer.summary()
    assert summary["flops_per_step"] > 0 and summary["peak_flops"] is None and summary["mfu"] is None


def test_jsonl_has_one_line_per_step(tmp_path):
    training = TinyTraining()
    path = tmp_path / "steps.jsonl"
    with trainprof.StepTimer(training.model, training.optimizer, log_every=None, jsonl_path=path) as timer:
        loop(training, timer, batches(5))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2, 3, 4]
    assert [line["excluded"] for line in lines] == [True, False, False, False, False]
    assert set(lines[1]) >= {"step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms", "samples"}
    assert lines[1]["samples"] == 8


def test_a_line_every_n_steps_on_stderr_when_logging_is_not_set_up(capsys):
    training = TinyTraining()
    with trainprof.StepTimer(training.model, training.optimizer, log_every=2) as timer:
        loop(training, timer, batches(6))
    logged = [line for line in capsys.readouterr().err.splitlines() if line.startswith("trainprof step")]
    assert len(logged) == 2  # 5 measured steps
    assert "ms/step (data" in logged[0] and "samples/s" in logged[0]


def test_the_line_goes_to_logging_when_it_would_be_shown(caplog, capsys):
    training = TinyTraining()
    caplog.set_level(logging.INFO, logger="trainprof.steps")
    with trainprof.StepTimer(training.model, training.optimizer, log_every=2) as timer:
        loop(training, timer, batches(6))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["trainprof step 2", "trainprof step 4"]
    assert "trainprof step" not in capsys.readouterr().err


def test_without_wrap_steps_run_from_one_optimizer_step_to_the_next():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, batch_size=8, log_every=None)
    training.run(6, after_step=lambda: time.sleep(SLEEP_S))  # e.g. an unwrapped, slow loader
    summary = timer.summary()
    assert summary["steps"] == 5
    assert summary["phases_ms"]["data"] == 0.0
    assert summary["phases_ms"]["other"] >= SLEEP_MS  # the time between steps is not lost
    assert summary["phases_ms"]["forward"] > 0 and summary["phases_ms"]["optimizer"] > 0


def test_close_removes_the_hooks():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    training.run(3)
    timer.close()
    before = timer.summary()["steps"]
    training.run(3)
    assert timer.summary()["steps"] == before == 2


def test_break_out_of_the_loop_drops_the_unfinished_step():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, log_every=None, warmup_steps=0,
                                flops_per_step=1.0)
    for i, (x, y) in enumerate(timer.wrap(batches(10))):
        if i == 4:
            break
        training.step(x, y)
    assert timer.summary()["steps"] == 4


def wrapped_by_trainprof() -> bool:
    return getattr(torch.autograd.backward, "_trainprof", False)


def test_backward_is_timed_through_torch_autograd_backward_until_the_last_close():
    training = TinyTraining()
    gc.collect()  # timers that earlier tests dropped without close() go, and stop listening
    first = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    second = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    assert wrapped_by_trainprof()
    first.close()
    assert wrapped_by_trainprof()  # the second timer still listens
    training.run(3)
    second.close()
    gc.collect()
    assert not wrapped_by_trainprof()  # torch's own function is back
    assert second.summary()["phases_ms"]["backward"] > 0
    assert first.summary()["steps"] == 0


def test_checkpointed_recompute_counts_once_as_backward():
    training = TinyTraining()
    from torch.utils.checkpoint import checkpoint

    inner = training.model

    class Checkpointed(torch.nn.Module):
        def forward(self, x):  # reentrant checkpointing calls torch.autograd.backward inside backward
            return checkpoint(inner, x, use_reentrant=True)

    model = Checkpointed()
    timer = trainprof.StepTimer(model, training.optimizer, log_every=None, warmup_steps=0, flops_per_step=1.0)
    for x, y in timer.wrap(batches(3)):
        x.requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        training.optimizer.step()
    timer.close()
    lines = timer.summary()
    assert lines["steps"] == 3
    assert lines["phases_ms"]["backward"] > 0
    assert sum(lines["phases_ms"].values()) == pytest.approx(lines["step_ms"]["mean"], rel=1e-6)


def test_jsonl_in_a_new_folder_is_created(tmp_path):
    training = TinyTraining()
    path = tmp_path / "logs" / "run1" / "steps.jsonl"
    with trainprof.StepTimer(training.model, training.optimizer, log_every=None, jsonl_path=path) as timer:
        loop(training, timer, batches(3))
    assert len(path.read_text().splitlines()) == 3


@pytest.mark.parametrize("where", ["a folder", "a full disk"])
def test_a_jsonl_file_that_cannot_be_written_warns_once_and_timing_goes_on(tmp_path, where):
    if where == "a full disk" and not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full, where every write fails with ENOSPC")
    path = tmp_path if where == "a folder" else "/dev/full"
    training = TinyTraining()
    with (
        pytest.warns(RecordingWarning, match="JSONL file") as caught,
        trainprof.StepTimer(training.model, training.optimizer, log_every=2,
                            jsonl_path=path) as timer,  # log lines flush the file
    ):
        loop(training, timer, batches(6))
    assert len([w for w in caught if issubclass(w.category, RecordingWarning)]) == 1
    assert training.steps_done == 6 and timer.summary()["steps"] == 5


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA A100 80GB PCIe", 312e12),
    ("Tesla V100-SXM2-16GB", 125e12), ("Tesla T4", 65e12), ("NVIDIA L4", 121e12),
    ("NVIDIA L40S", 362e12), ("NVIDIA B200", 2.25e15), ("NVIDIA GB200", 2.5e15),
    ("AMD Instinct MI300X", 1307e12),
    # Near misses get no peak rather than a wrong one (pass peak_flops= for them).
    ("NVIDIA A10G", None), ("NVIDIA GeForce RTX 4090", None), ("Tesla V100S-PCIE-32GB", None),
])
def test_mfu_peak_from_the_gpu_name(name, peak):
    from trainprof.capture.device import peak_flops_of_name

    assert peak_flops_of_name(name) == peak
