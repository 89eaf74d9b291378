"""Small real CPU training runs, each with one injected bottleneck, recorded with torch.profiler.

Every run trains the same MLP on pre-made batches; a pathology changes one thing (the dataset,
the optimizer, what the loop keeps or does after the step). ``record(kind, out)`` writes
``out/rank0.json`` and returns the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

# Two cores shared with other work: one intra-op thread keeps the timings steady.
torch.set_num_threads(1)

BATCH = 128
FEATURES = 256
HIDDEN = 512
CLASSES = 10
#: Profiler schedule: steps skipped, warmed up, recorded.
WAIT, WARMUP, ACTIVE = 1, 1, 11
STEPS = WAIT + WARMUP + ACTIVE
#: Pure-Python work per batch of the slow dataset, and per step of the logging loop (loop
#: iterations; about 10-20 ms on this machine type, comparable to a step).
SLOW_DATA_WORK = 150_000
LOGGING_WORK = 150_000
#: Every PERIOD-th step of the periodic run evaluates on EVAL_BATCHES extra batches.
PERIOD = 4
EVAL_BATCHES = 12
#: Loop steps after which CONTENDERS busy processes share this process's core, from
#: CONTEND_DELAY_MS into the next step (inside its ops, not between steps) for CONTEND_SHARE of
#: the median step so far: that step runs the same ops, slower, whatever else loads the machine,
#: and the busy processes are gone before it ends (the recorded loop steps are 2 to 12).
CONTEND_AFTER = (3, 8)
CONTEND_DELAY_MS = 1.0
CONTENDERS = 4
CONTEND_SHARE = 1.5
#: The per-parameter optimizer's model: this many tiny parameter tensors.
TINY_PARAMS = 400
#: The leaking loop keeps a metric computed on this many copies of the batch, with its graph
#: (about 4 MB of activations per step).
LEAK_REPEAT = 4


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


class TinyParams(nn.Module):
    """The MLP plus hundreds of tiny parameters (per-channel scales): a per-parameter optimizer
    pays its Python and dispatch cost once per tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.body = mlp()
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(4)) for _ in range(TINY_PARAMS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        bias = torch.stack(list(self.scales)).sum()
        return out + bias


def busy_python(n: int) -> float:
    """CPU work no PyTorch op records: a stand-in for decoding, augmenting, logging."""
    total = 0.0
    for i in range(n):
        total += (i % 7) * 0.5
    return total


class Batches(Dataset):
    """Pre-made batches; ``work`` adds that much pure-Python work to each (a slow decoder)."""

    def __init__(self, count: int, work: int = 0, batch: int = BATCH) -> None:
        gen = torch.Generator().manual_seed(1)
        self.x = torch.randn(count, batch, FEATURES, generator=gen)
        self.y = torch.randint(0, CLASSES, (count, batch), generator=gen)
        self.work = work

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.work:
            busy_python(self.work)
        return self.x[i], self.y[i]


#: A busy process: pinned to one core, for each line "start end" it reads (the monotonic clock
#: that time.perf_counter reads on Linux, shared by processes) it sleeps until start, then spins
#: until end.
SPIN = """
import os, sys, time
os.sched_setaffinity(0, {%d})
print("ready", flush=True)
for line in sys.stdin:
    start, end = map(float, line.split())
    time.sleep(max(0.0, start - time.perf_counter()))
    while time.perf_counter() < end:
        pass
"""


class Contention:
    """CONTENDERS busy processes on this thread's core, started by the loop."""

    def __init__(self, children: list[subprocess.Popen[str]]) -> None:
        self.children = children

    def start(self, seconds: float) -> None:
        """Every child spins for ``seconds`` from CONTEND_DELAY_MS from now."""
        start = time.perf_counter() + CONTEND_DELAY_MS / 1000
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write(f"{start} {start + seconds}\n")
            child.stdin.flush()


@contextlib.contextmanager
def contender() -> Iterator[Contention]:
    """Pin this thread to one core, with CONTENDERS busy processes on the same core that spin
    for the time given to ``start()``: contention from outside the loop."""
    before = os.sched_getaffinity(0)
    cpu = min(before)
    children = [subprocess.Popen([sys.executable, "-c", SPIN % cpu],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(CONTENDERS)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        os.sched_setaffinity(0, {cpu})
        yield Contention(children)
    finally:
        os.sched_setaffinity(0, before)
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
        for child in children:
            child.wait(timeout=30)


@dataclass
class Job:
    """One training loop: the dataset's extra work, the model, the optimizer, whether a metric
    is kept with its graph, how often an evaluation pass runs, and a hook after each step."""

    data_work: int = 0
    model: Callable[[], nn.Module] = mlp
    optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] = (
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9))
    keep_graphs: bool = False
    evaluate_every: int = 0
    after_step: Callable[[int, torch.Tensor], None] | None = None
    #: Loop steps after which another process contends for the core (``contender``).
    contend_after: tuple[int, ...] = ()
    batch: int = BATCH


def _log_metrics(step: int, loss: torch.Tensor) -> None:
    """Heavy per-step logging: Python work outside any op after the optimizer step."""
    json.dumps({"step": step, "stats": busy_python(LOGGING_WORK)})


JOBS: dict[str, Job] = {
    "healthy": Job(),
    "slow_data": Job(data_work=SLOW_DATA_WORK),
    "per_param_optimizer": Job(model=TinyParams, optimizer=lambda p: torch.optim.Adam(
        p, lr=1e-3, foreach=False)),
    "per_param_optimizer_fixed": Job(model=TinyParams, optimizer=lambda p: torch.optim.Adam(
        p, lr=1e-3, fused=True)),
    "leak": Job(keep_graphs=True),
    "periodic": Job(evaluate_every=PERIOD),
    # Four times the batch: 20 ms steps, so that a millisecond of noise is not an outlier.
    "contended": Job(contend_after=CONTEND_AFTER, batch=4 * BATCH),
    "logging": Job(after_step=_log_metrics),
}


def _steps(job: Job, on_step: Callable[[], None]) -> None:
    with contender() if job.contend_after else contextlib.nullcontext() as contend:
        _loop(job, on_step, contend)


def _loop(job: Job, on_step: Callable[[], None], contend: Contention | None) -> None:
    model = job.model()
    optimizer = job.optimizer(list(model.parameters()))
    loader = DataLoader(Batches(STEPS, job.data_work, job.batch), batch_size=None,
                        num_workers=0)
    eval_x = torch.randn(EVAL_BATCHES, BATCH, FEATURES)
    kept: list[torch.Tensor] = []
    took: list[float] = []  # each step's wall time, seconds
    began = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if job.keep_graphs:  # a metric kept for an epoch average, with its graph
            kept.append(nn.functional.cross_entropy(model(x.repeat(LEAK_REPEAT, 1)),
                                                    y.repeat(LEAK_REPEAT)))
        if job.after_step is not None:
            job.after_step(step, loss)
        if job.evaluate_every and step % job.evaluate_every == job.evaluate_every - 1:
            with torch.no_grad():  # an evaluation pass, inside ops
                for xb in eval_x:
                    model(xb)
        took.append(time.perf_counter() - began)
        if contend is not None and step in job.contend_after:
            contend.start(CONTEND_SHARE * statistics.median(took))
        began = time.perf_counter()
        on_step()


def record(kind: str, out: Path, *, profile_memory: bool = False,
           with_stack: bool = False) -> Path:
    """Run the job under torch.profiler; writes ``out/rank0.json`` and returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=profile_memory,
                 with_stack=with_stack,
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)) as prof:
        _steps(JOBS[kind], prof.step)
    prof.export_chrome_trace(str(out / "rank0.json"))
    return out
