"""The step timer's figures checked against independent readings: each step's time and phases
bracketed by the test's own clock, and the one-off FLOP count against a hand count."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import trainprof
from trainprof.capture.safety import RecordingWarning

from capture_helpers import TinyTraining

BATCH, IN, HIDDEN, OUT = 8, 16, 32, 4  # TinyTraining's model: Linear(16, 32), ReLU, Linear(32, 4)


def batches(n: int, size: int = BATCH) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(size, IN), torch.randint(0, OUT, (size,))) for _ in range(n)]


def hand_flops(batch: int, backward: bool) -> int:
    """Matrix products of Linear(16, 32) and Linear(32, 4), 2 FLOPs a multiply-add: forward;
    backward, each weight's gradient and the hidden layer's input gradient (the batch itself
    needs none)."""
    forward = 2 * batch * (IN * HIDDEN + HIDDEN * OUT)
    return forward + (forward + 2 * batch * HIDDEN * OUT if backward else 0)


def test_each_step_and_phase_lies_within_the_tests_own_clock_readings(tmp_path):
    """The test reads perf_counter around each part of the step; the timer's figure for each
    step lies between what happened inside its marks and what happened outside them: exact
    inequalities on one clock, no tolerance but the JSONL's rounding."""
    training = TinyTraining()
    path = tmp_path / "steps.jsonl"
    clock = time.perf_counter
    got, done, forward, backward, optimizer = [], [], [], [], []
    with trainprof.StepTimer(training.model, training.optimizer, log_every=None, jsonl_path=path,
                             count_flops=False) as timer:
        for x, y in timer.wrap(batches(40)):
            got.append(clock())  # the timer's step began before this, at the fetch
            t0 = clock()
            output = training.model(x)
            t1 = clock()
            loss = torch.nn.functional.cross_entropy(output, y)
            training.optimizer.zero_grad(set_to_none=True)
            t2 = clock()
            loss.backward()
            t3 = clock()
            training.optimizer.step()
            t4 = clock()
            forward.append(t1 - t0)
            backward.append(t3 - t2)
            optimizer.append(t4 - t3)
            done.append(clock())  # the timer's step ends after this, at the next fetch
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(40))
    rounding = 1e-4  # ms: the JSONL keeps 4 decimals
    for k in range(1, 39):  # the last step ends at the loader's end, after `done`
        step_ms = lines[k]["step_ms"]
        assert (done[k] - got[k]) * 1e3 - rounding <= step_ms <= (got[k + 1] - done[k - 1]) * 1e3 + rounding
        for phase, outside in (("forward", forward), ("backward", backward), ("optimizer", optimizer)):
            assert 0 < lines[k][f"{phase}_ms"] <= outside[k] * 1e3 + rounding, phase
        assert lines[k]["data_ms"] <= (got[k] - done[k - 1]) * 1e3 + rounding
        parts = sum(lines[k][f"{p}_ms"] for p in trainprof.capture.steps.PHASES)
        assert parts == pytest.approx(step_ms, abs=6 * rounding)
    measured = timer.step_times_ms()
    assert measured == pytest.approx([line["step_ms"] for line in lines[1:]], abs=rounding)


def test_the_flop_count_equals_a_hand_count_and_runs_outside_the_steps():
    training = TinyTraining()
    timer = trainprof.StepTimer(training.model, training.optimizer, peak_flops=1e9, log_every=None)
    for x, y in timer.wrap(batches(6)):
        training.step(x, y)
    summary = timer.summary()
    assert summary["flops_per_step"] == hand_flops(BATCH, backward=True)
    assert summary["steps"] == 5 and summary["excluded_steps"] == 1  # the warm-up step only
    seconds = summary["steps"] * summary["step_ms"]["mean"] / 1e3
    assert summary["mfu"] == pytest.approx(hand_flops(BATCH, True) * 5 / seconds / 1e9)
    # The real model is untouched: its parameters are still real, its hooks are the timer's two.
    assert all(p.device.type == "cpu" for p in training.model.parameters())
    assert len(training.model._forward_pre_hooks) == len(training.model._forward_hooks) == 1
    timer.close()
    assert not training.model._forward_pre_hooks and not training.model._forward_hooks


def test_counting_flops_or_not_gives_the_same_step_statistics(tmp_path):
    """Same steps, same exclusions, same samples; only the FLOP figures differ."""
    summaries = {}
    for count in (True, False):
        training = TinyTraining()
        with trainprof.StepTimer(training.model, training.optimizer, log_every=None, count_flops=count,
                                 jsonl_path=tmp_path / f"{count}.jsonl") as timer:
            for x, y in timer.wrap(batches(12)):
                training.step(x, y)
        summaries[count] = timer.summary()
    on, off = summaries[True], summaries[False]
    assert on["flops_per_step"] == hand_flops(BATCH, True) and off["flops_per_step"] is None
    for key in ("steps", "excluded_steps"):
        assert on[key] == off[key]
    assert on["steps"] == 11
    excluded = {count: [json.loads(line)["excluded"] for line in (tmp_path / f"{count}.jsonl").open()]
                for count in (True, False)}
    assert excluded[True] == excluded[False] == [True] + [False] * 11


def test_a_count_asked_for_during_training_leaves_out_the_step_that_paid_for_it(tmp_path, capsys):
    """A log line needs MFU (peak_flops given): the count runs at that read-back, between two
    steps, and the step it lands in is left out."""
    training = TinyTraining()
    path = tmp_path / "steps.jsonl"
    with trainprof.StepTimer(training.model, training.optimizer, peak_flops=1e9, log_every=2,
                             jsonl_path=path) as timer:
        for x, y in timer.wrap(batches(40)):
            training.step(x, y)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    excluded = [line["step"] for line in lines if line["excluded"]]
    # Steps 0-31 are read back when step 32 begins; the first log line (after step 2) counts.
    assert excluded == [0, 32]
    assert timer.summary()["flops_per_step"] == hand_flops(BATCH, True)
    assert "MFU" in capsys.readouterr().err


def test_inference_counts_the_forward_only_and_kwargs_reach_the_copy():
    class Keyword(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = TinyTraining().model

        def forward(self, *, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": self.inner(x)}

    model = Keyword()
    timer = trainprof.StepTimer(model, torch.optim.SGD(model.parameters(), lr=0.1), log_every=None)
    with torch.no_grad():
        for x, _ in timer.wrap(batches(3, size=5)):
            model(x=x)
    assert timer.flops_per_step == hand_flops(5, backward=False)


def test_a_wrapped_model_counts_the_model_inside():
    training = TinyTraining()
    model = torch.nn.DataParallel(training.model)  # on a CPU-only machine: calls the module itself
    timer = trainprof.StepTimer(model, training.optimizer, log_every=None)
    for x, y in timer.wrap(batches(2)):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        training.optimizer.step()
    assert timer.summary()["flops_per_step"] == hand_flops(BATCH, True)


def test_a_model_the_meta_copy_cannot_run_warns_once_and_leaves_mfu_unknown():
    class DataDependent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(IN, OUT)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum().item() > 1e9:  # reads the data: a meta tensor has none
                x = x * 2
            return self.linear(x)

    model = DataDependent()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    timer = trainprof.StepTimer(model, optimizer, peak_flops=1e9, log_every=None)
    for x, y in timer.wrap(batches(4)):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    with pytest.warns(RecordingWarning, match="meta-device copy") as caught:
        summary = timer.summary()
    assert len(caught) == 1
    assert summary["flops_per_step"] is None and summary["mfu"] is None
    assert summary["steps"] == 3  # the timing is unaffected


def test_a_given_flops_per_step_or_count_flops_false_counts_nothing():
    training = TinyTraining()
    given = trainprof.StepTimer(training.model, training.optimizer, flops_per_step=123.0, log_every=None)
    off = trainprof.StepTimer(training.model, training.optimizer, count_flops=False, log_every=None)
    set_later = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    set_later.flops_per_step = 7.0  # before the first forward: no count overrides it afterwards
    training.run(3)
    assert given.summary()["flops_per_step"] == 123.0
    assert off.summary()["flops_per_step"] is None
    assert set_later.summary()["flops_per_step"] == 7.0
    for timer in (given, off, set_later):
        timer.close()
    assert not training.model._forward_pre_hooks


def test_the_flop_count_matches_torchs_count_of_a_real_step():
    """The meta copy against FlopCounterMode around a real step (data, loss and all)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))) for _ in range(3)]
    with FlopCounterMode(display=False) as real:
        torch.nn.functional.cross_entropy(model(data[0][0]), data[0][1]).backward()
    optimizer.zero_grad()
    timer = trainprof.StepTimer(model, optimizer, log_every=None)
    for x, y in timer.wrap(data):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert timer.summary()["flops_per_step"] == real.get_total_flops() > 0
