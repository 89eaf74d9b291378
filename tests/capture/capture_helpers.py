"""Helpers for the recording tests: reading traces back, running Python, a tiny training loop."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch

# Two cores shared with other work: one intra-op thread keeps the timings steady.
torch.set_num_threads(1)


def read_trace(path: Path) -> dict[str, Any]:
    """A gzipped Kineto trace, decoded (fails the test if it is not gzip JSON)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def profiler_steps(trace: dict[str, Any]) -> list[int]:
    """The N of every `ProfilerStep#N` span, sorted."""
    return sorted(
        int(e["name"].split("#")[1])
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
    )


def trace_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def run_python(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs `python ARGS` in a fresh interpreter with one intra-op thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_torchrun(args: list[str], cwd: Path, timeout: float = 180,
                 outputs: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone ARGS``. torch 2.13's gloo teardown sometimes aborts a rank
    (SIGABRT) as it exits, its work done (upstream; the jobs under tests/*/jobs end with
    os._exit(0) for it, which a script run by ``trainprof run`` cannot): a job whose rank died
    of SIGABRT runs once more, from removed ``outputs``. Any other failure is returned as is."""
    for attempt in (1, 2):
        result = run_python(["-m", "torch.distributed.run", "--standalone", *args], cwd=cwd,
                            timeout=timeout)
        if result.returncode == 0 or "(SIGABRT)" not in result.stderr or attempt == 2:
            return result
        for path in outputs:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    return result


class TinyTraining:
    """A linear model trained on random batches; `run(n, after_step)` does n real steps."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.steps_done = 0

    def step(self, x: Any = None, y: Any = None) -> float:
        x = torch.randn(8, 16) if x is None else x
        y = torch.randint(0, 4, (x.shape[0],)) if y is None else y
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.steps_done += 1
        return float(loss.detach())

    def run(self, steps: int, after_step: Any = None) -> None:
        for _ in range(steps):
            self.step()
            if after_step is not None:
                after_step()


def ddp_script(steps: int, before_exit: str = "") -> str:
    """A tiny DDP job over gloo, for torchrun: `steps` steps, then `before_exit` (code), then
    the process group is destroyed."""
    return textwrap.dedent(
        f"""
        from pathlib import Path
        import torch, torch.distributed as dist

        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range({steps}):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """
    ) + textwrap.dedent(before_exit) + "dist.barrier()\ndist.destroy_process_group()\n"

