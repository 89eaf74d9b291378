"""Two-rank jobs over gloo on CPU, each recorded with torch.profiler: a pipeline, and FSDP2.

``python parallel_jobs.py OUT_DIR`` starts two processes (torch.multiprocessing, gloo on
127.0.0.1) that run, one after the other in the same process group, and write
``OUT_DIR/JOB/rank{R}.json``:

* ``pipeline_heavy``: a 2-stage ``torch.distributed.pipelining`` pipeline (``PipelineStage`` +
  ``ScheduleGPipe``, MICRO_BATCHES micro-batches) whose stage 1 holds HEAVY times the layers of
  stage 0 (every layer the same Linear + ReLU), so stage 0 waits in ``recv`` for stage 1;
* ``pipeline_balanced``: the same layers split evenly (the healthy control);
* ``fsdp``: FSDP2 (``fully_shard`` on each layer, then on the model) on a stack of layers.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

#: Every layer: Linear(WIDTH, WIDTH) + ReLU, on BATCH rows per step.
WIDTH = 512
BATCH = 256
MICRO_BATCHES = 4
#: The balanced control's micro-batches: enough that the schedule's own bubble stays small.
BALANCED_MICRO_BATCHES = 8
#: Layers of the light stage, and how many times as many the heavy stage has.
LIGHT_LAYERS = 2
HEAVY = 4
FSDP_LAYERS = 4
WAIT, WARMUP, ACTIVE = 1, 1, 5


def layers(n: int) -> nn.Sequential:
    return nn.Sequential(*[m for _ in range(n) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())])


def _profiled(run_step, out: Path, rank: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            run_step()
            prof.step()
    prof.export_chrome_trace(str(out / f"rank{rank}.json"))


def pipeline(out: Path, rank: int, split: tuple[int, int], micro: int) -> None:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    torch.manual_seed(rank)
    stage = PipelineStage(layers(split[rank]), rank, 2, torch.device("cpu"))
    sched = ScheduleGPipe(stage, micro, loss_fn=lambda y, t: ((y - t) ** 2).mean())
    x, target = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)

    def step() -> None:
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=target)

    _profiled(step, out, rank)


def fsdp(out: Path, rank: int) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = layers(FSDP_LAYERS)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        model(x).square().mean().backward()
        optim.step()
        optim.zero_grad()

    _profiled(step, out, rank)


def worker(rank: int, out: str, port: int) -> None:
    torch.set_num_threads(1)
    # Gradients shrink through the stages to denormal floats, which make a CPU matmul several
    # times slower on one stage only: flushed to zero, each layer costs the same everywhere.
    torch.set_flush_denormal(True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    heavy = LIGHT_LAYERS * HEAVY
    pipeline(Path(out) / "pipeline_heavy", rank, (LIGHT_LAYERS, heavy), MICRO_BATCHES)
    dist.barrier()
    even = (LIGHT_LAYERS + heavy) // 2
    pipeline(Path(out) / "pipeline_balanced", rank, (even, even), BALANCED_MICRO_BATCHES)
    dist.barrier()
    fsdp(Path(out) / "fsdp", rank)
    dist.barrier()
    dist.destroy_process_group()
    # torch 2.13 can abort at exit after a profiled gloo job (a C++ thread destructor), after
    # the traces are written: leave without the static destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    mp.start_processes(worker, args=(sys.argv[1], free_port()), nprocs=2, start_method="spawn")
