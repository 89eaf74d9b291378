"""The memory breakdown of real models and optimizers on the CPU, against hand-computed bytes."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import trainprof
from trainprof.analysis.decode import record
from trainprof.analysis.snapshot.breakdown import MemoryBreakdown
from trainprof.capture.memory_breakdown import MemoryProbe, tally
from trainprof.report.terminal.memory_breakdown import parts as breakdown_parts

from capture_helpers import run_python

# Linear(10, 20) + Linear(20, 5): 10*20 + 20 + 20*5 + 5 = 325 parameters in 4 tensors.
PARAMS = 325
TENSORS = 4
FP32 = 4


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 5))


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int = 2,
          after_step=None) -> None:
    dtype = next(model.parameters()).dtype
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        model(torch.randn(8, 10, dtype=dtype)).float().pow(2).mean().backward()
        optimizer.step()
        if after_step is not None:
            after_step()


def breakdown_after_training(optimizer_factory) -> dict:
    model = mlp()
    optimizer = optimizer_factory(model.parameters())
    train(model, optimizer)
    probe = MemoryProbe(None, warn=pytest.fail)
    probe.capture_once(model, optimizer)
    return probe.breakdown()


# (optimizer, state bytes): SGD keeps nothing, momentum one buffer per parameter, Adam two (and
# a 4-byte float32 `step` scalar per tensor, on the CPU for every implementation).
OPTIMIZERS = {
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.1), 0),
    "sgd_momentum": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), PARAMS * FP32),
    "adam": (lambda p: torch.optim.Adam(p, lr=1e-3), 2 * PARAMS * FP32 + TENSORS * 4),
    "adamw_foreach": (lambda p: torch.optim.AdamW(p, lr=1e-3, foreach=True), 2 * PARAMS * FP32 + TENSORS * 4),
    "adamw_fused": (lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True), 2 * PARAMS * FP32 + TENSORS * 4),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_parameters_gradients_and_optimizer_state_match_hand_counts(name):
    factory, state_bytes = OPTIMIZERS[name]
    b = breakdown_after_training(factory)
    assert b["bytes"]["parameters"] == PARAMS * FP32 == 1300
    assert b["bytes"]["gradients"] == PARAMS * FP32
    assert b["bytes"]["optimizer_state"] == state_bytes
    assert b["device"] == "cpu"
    if name.startswith("adam"):
        assert b["optimizer_state_keys"] == {"exp_avg": 1300, "exp_avg_sq": 1300, "step": 16}
        # the rule of thumb made concrete: two states per parameter, plus the step counters
        assert b["optimizer_state_per_parameter"] == pytest.approx((2600 + 16) / 1300)
    if name == "sgd_momentum":
        assert b["optimizer_state_keys"] == {"momentum_buffer": 1300}
        assert b["optimizer_state_per_parameter"] == pytest.approx(1.0)
    if name == "sgd":
        assert b["optimizer_state_per_parameter"] is None


def test_mixed_dtypes_are_counted_by_dtype():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20).to(torch.bfloat16),  # 220 bf16
                                torch.nn.Linear(20, 5))                       # 105 fp32
    model[1].to(torch.float16)  # 105 fp16
    layer_in, layer_out = model[0], model[1]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4, 10, dtype=torch.bfloat16)
    for _ in range(2):
        optimizer.zero_grad()
        layer_out(layer_in(x).to(torch.float16)).float().sum().backward()
        optimizer.step()
    rows = {(r["category"], r["dtype"]): (r["bytes"], r["tensors"]) for r in tally(model, optimizer).rows_dicts()}
    assert rows[("parameters", "bfloat16")] == (220 * 2, 2)
    assert rows[("parameters", "float16")] == (105 * 2, 2)
    assert rows[("gradients", "bfloat16")] == (220 * 2, 2)
    # Adam's moments take the parameter's dtype; `step` is a float32 scalar per tensor
    assert rows[("optimizer_state", "bfloat16")] == (2 * 220 * 2, 4)
    assert rows[("optimizer_state", "float16")] == (2 * 105 * 2, 4)
    assert rows[("optimizer_state", "float32")] == (4 * 4, 4)


def test_tied_weights_and_views_are_counted_once():
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(50, 8)
    head = torch.nn.Linear(8, 50, bias=False)
    head.weight = embedding.weight  # tied, as in GPT-2
    model = torch.nn.ModuleDict({"embedding": embedding, "head": head})
    counted = tally(model)
    assert counted.total("parameters") == 50 * 8 * FP32
    flat = torch.zeros(100)
    views = [torch.nn.Parameter(flat[:60]), torch.nn.Parameter(flat[60:])]
    assert tally(torch.nn.ParameterList(views)).total("parameters") == 100 * FP32


def test_step_timer_summary_has_the_breakdown_after_the_first_step():
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    with trainprof.StepTimer(model, optimizer, log_every=None) as timer:
        # zero_grad(set_to_none) after the step: the gradients are gone when summary() runs,
        # so the breakdown must have been taken right after optimizer.step()
        for batch in timer.wrap([torch.randn(8, 10) for _ in range(3)]):
            model(batch).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    summary = timer.summary()
    assert json.loads(json.dumps(summary)) == summary
    b = summary["memory_breakdown"]
    assert b["bytes"]["parameters"] == b["bytes"]["gradients"] == 1300
    assert b["bytes"]["optimizer_state"] == 2 * 1300 + TENSORS * 4
    # The summary's peak and the breakdown's parts agree: with the rest of the peak known,
    # parameters + gradients + state + activations + what the first step left + the process =
    # the peak (issue: a 77 kB model's "peak 369,577,984 bytes" beside "activations 622,784").
    by = b["bytes"]
    if by["activations"] is not None:  # null when the process peaked before the timer began
        parts = ("parameters", "gradients", "optimizer_state", "activations", "runtime",
                 "process")
        assert by["process"] > 0 and sum(by[k] for k in parts) == by["peak"]


def test_recorder_counts_the_first_optimizer_that_steps(tmp_path):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with trainprof.profile(output_trace_dir=tmp_path, schedule_option={"wait": 1, "warmup": 1, "active": 1}) as prof:
        assert prof.memory_breakdown() is None  # nothing has stepped yet
        train(model, optimizer, steps=4, after_step=prof.step)
    b = prof.memory_breakdown()
    assert (b["bytes"]["parameters"], b["bytes"]["gradients"], b["bytes"]["optimizer_state"]) == (1300, 1300, 1300)
    assert prof.memory_snapshots == []


def test_memory_snapshot_on_cpu_warns_once_and_training_goes_on(tmp_path):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trainprof.profile(output_trace_dir=tmp_path, memory_snapshot=True,
                               schedule_option={"wait": 0, "warmup": 1, "active": 1, "repeat": 2}) as prof:
            train(model, optimizer, steps=6, after_step=prof.step)
    notices = [str(w.message) for w in caught if issubclass(w.category, trainprof.RecordingWarning)]
    assert len(notices) == 1 and "needs a CUDA device" in notices[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.step1.pt.trace.json.gz", "rank0.step3.pt.trace.json.gz"]
    assert prof.memory_snapshots == []


ACTIVATIONS_JOB = """
import json, torch
from trainprof.capture.memory_breakdown import MemoryProbe
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()) for _ in range(4)])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
probe = MemoryProbe(None, warn=print)
kept = []
for step in range(2):
    optimizer.zero_grad()
    model(torch.randn(8192, 512)).sum().backward()   # each layer saves 8192 x 512 floats: 16.8 MB
    if step == 0:  # what a first step can leave behind: a cache, a buffer, a lazy start-up
        kept.append(torch.ones(STARTUP_BYTES // 4))
    optimizer.step()
    probe.capture_once(model, optimizer)
print(json.dumps(probe.breakdown()))
"""


STARTUP_BYTES = 96 * 2**20


@pytest.mark.slow
@pytest.mark.parametrize("parent_mib", [0, 1024])
def test_cpu_activations_are_the_growth_of_the_peak_beyond_the_persistent_bytes(tmp_path,
                                                                              parent_mib):
    """Also when the job is started by a process larger than itself (a launcher, a test
    runner): Linux's ru_maxrss starts at the parent's size, the job's own peak (VmHWM) not."""
    ballast = bytearray(parent_mib * 2**20)
    ballast[::4096] = b"x" * len(range(0, len(ballast), 4096))  # resident, not just reserved
    done = run_python(["-c", ACTIVATIONS_JOB.replace("STARTUP_BYTES", str(STARTUP_BYTES))],
                      cwd=tmp_path)
    del ballast
    assert done.returncode == 0, done.stderr
    b = json.loads(done.stdout.strip().splitlines()[-1])
    params = 4 * (512 * 512 + 512) * FP32
    assert b["bytes"]["parameters"] == b["bytes"]["gradients"] == params
    saved = 5 * 8192 * 512 * FP32  # kept for backward: the input and each block's ReLU output
    assert b["bytes"]["activations"] >= 0.8 * saved
    # what the first step left resident is its own part, not activations (issue 25: a 77 kB
    # model's 121 MB of "activations and temporaries" was torch's start-up and the profiler's)
    assert b["bytes"]["runtime"] >= STARTUP_BYTES
    assert b["bytes"]["peak"] >= params * 2 + b["bytes"]["activations"]
    # The parts add up to the peak: the process before training is a part of its own.
    by = b["bytes"]
    parts = ("parameters", "gradients", "optimizer_state", "activations", "runtime", "process")
    assert sum(by[k] for k in parts) == by["peak"] and by["process"] > 0
    shares = [pct for _, _, pct, _ in breakdown_parts(record(b, MemoryBreakdown))]
    assert sum(shares) == pytest.approx(100.0)
    assert shares[-1] == pytest.approx(100.0 * by["process"] / by["peak"])


RUN_SCRIPT = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 5))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(4):
    optimizer.zero_grad()
    model(torch.randn(8, 10)).pow(2).mean().backward()
    optimizer.step()
"""


@pytest.mark.slow
def test_trainprof_run_prints_the_breakdown_and_memory_snapshot_warns_once_on_cpu(tmp_path):
    (tmp_path / "train.py").write_text(RUN_SCRIPT)
    done = run_python(["-m", "trainprof", "run", "--out", "traces", "--wait", "1", "--warmup", "1",
                       "--active", "1", "--memory-snapshot", "--with-stack", "--", "train.py"],
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "Where the memory goes on cpu" in out
    assert "parameters 1.30 kB" in out and "optimizer state 2.62 kB" in out  # 2 x 1300 + 4 x 4
    assert "left resident by the first step" in out
    # ops are charged to the script's line, not to trainprof's own profiler step (issue 25);
    # torch's Python tracer names a frame already running when tracing starts by the line it
    # is at then (here the optimizer step, where trainprof's hook starts the window)
    line = next(i for i, text in enumerate(RUN_SCRIPT.splitlines(), 1) if "optimizer.step" in text)
    assert f"aten::addmm ← train.py:{line} <module>" in out and "profiler.py" not in out
    assert done.stderr.count("memory_snapshot needs a CUDA device") == 1
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["rank0.step2.pt.trace.json.gz"]
