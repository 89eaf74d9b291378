"""Two-rank jobs over gloo on CPU, each recorded with torch.profiler: a pipeline, and FSDP2.

``python parallel_jobs.py OUT_DIR`` starts two processes (torch.multiprocessing, gloo on
127.0.0.1) that run, one after the other in the same process group, and write
``OUT_DIR/JOB/rank{R}.json``:

* ``pipeline_heavy``: a 2-stage ``torch.distributed.pipelining`` pipeline (``PipelineStage`` +
  ``ScheduleGPipe``, MICRO_BATCHES micro-batches) whose stage 1 holds HEAVY times the layers of
  stage 0 (every layer the same Linear + ReLU), so stage 0 waits in ``recv`` for stage 1;
* ``pipeline_balanced``: the same layers split evenly (the healthy control);
* ``pipeline_few``: the balanced split fed FEW_MICRO_BATCHES micro-batches, too few for 2
  stages (the schedule's bubble is 1/3 of the step);
* ``fsdp``: FSDP2 (``fully_shard`` on each layer, then on the model) on a stack of wide layers,
  FSDP_MICRO_STEPS micro-steps of gradient accumulation a step (gradients reduce-scattered on
  the last), no prefetch: each layer's all-gather is issued when the layer needs it;
* ``fsdp_prefetch``: the same with explicit prefetch (each layer's all-gather issued during the
  layer before it in forward, and after it in backward) and the unshard asynchronous, which on
  CPU is what lets gloo run the prefetched all-gather beside the compute (the healthy control);
* ``fsdp_slow_rank``: FSDP2 on narrower layers (WIDTH, BATCH rows: their collectives cost
  little), one micro-step a step, no prefetch, where rank SLOW_RANK sleeps
  SLOW_DELAY_S in layer SLOW_LAYER's forward (a ``slow_rank_delay`` range): the other rank
  waits that long for it in the next all-gather, every step.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import record_function

import two_ranks  # this folder's: the script's folder is on sys.path

#: Every layer: Linear(WIDTH, WIDTH) + ReLU, on BATCH rows per step.
WIDTH = 512
BATCH = 256
MICRO_BATCHES = 4
#: The balanced control's micro-batches: enough that the schedule's own bubble stays small.
BALANCED_MICRO_BATCHES = 8
#: Layers of the light stage, and how many times as many the heavy stage has.
LIGHT_LAYERS = 2
HEAVY = 4
#: Too few micro-batches for 2 stages: the ideal bubble is 1 / (2 + 1) of the step.
FEW_MICRO_BATCHES = 2
FSDP_LAYERS = 3
#: The FSDP jobs' layers are wide (a 4 MB all-gather each) and fed few rows, so that gathering
#: a layer costs about as much as computing it.
FSDP_WIDTH = 1024
FSDP_BATCH = 64
FSDP_MICRO_STEPS = 2
#: The slow rank, how long it sleeps a step, and in which layer's forward (a Sequential index).
SLOW_RANK = 1
SLOW_DELAY_S = 0.3
SLOW_LAYER = 2
WAIT, WARMUP, ACTIVE = 1, 1, 5
#: The jobs added later record fewer steps, to keep the whole recording short.
SHORT = (0, 1, 3)
#: The slow rank's job: its delay is far above the ranks' noise, two steps are enough.
SLOW_STEPS = (0, 1, 2)


def layers(n: int, width: int = WIDTH) -> nn.Sequential:
    return nn.Sequential(*[m for _ in range(n) for m in (nn.Linear(width, width), nn.ReLU())])


def pipeline(out: Path, rank: int, split: tuple[int, int], micro: int,
             steps: tuple[int, int, int] = (WAIT, WARMUP, ACTIVE)) -> None:
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

    two_ranks.profiled(step, out, rank, steps)


def fsdp(out: Path, rank: int, prefetch: bool = False, micro_steps: int = FSDP_MICRO_STEPS,
         delay_s: float = 0.0, shape: tuple[int, int] = (FSDP_WIDTH, FSDP_BATCH),
         steps: tuple[int, int, int] = SHORT) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    width, batch = shape
    model = layers(FSDP_LAYERS, width)
    units = [m for m in model if isinstance(m, nn.Linear)]
    for layer in units:
        fully_shard(layer)
    fully_shard(model)
    if prefetch:
        for before, after in zip(units, units[1:], strict=False):
            before.set_modules_to_forward_prefetch([after])
            after.set_modules_to_backward_prefetch([before])
        # On CPU the prefetched all-gather overlaps the compute only when issued
        # asynchronously (gloo runs it on its own thread); on a GPU FSDP2 uses streams instead.
        model._set_unshard_async_op(True)
    if delay_s:
        def sleep(*_: object) -> None:
            with record_function("slow_rank_delay"):
                time.sleep(delay_s)

        model[SLOW_LAYER].register_forward_pre_hook(sleep)
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, width)

    def step() -> None:
        for k in range(micro_steps):
            model.set_requires_gradient_sync(k == micro_steps - 1)
            model(x).square().mean().backward()
        optim.step()
        optim.zero_grad()

    two_ranks.profiled(step, out, rank, steps)


def jobs(rank: int, out: Path) -> None:
    heavy = LIGHT_LAYERS * HEAVY
    pipeline(out / "pipeline_heavy", rank, (LIGHT_LAYERS, heavy), MICRO_BATCHES)
    dist.barrier()
    even = (LIGHT_LAYERS + heavy) // 2
    pipeline(out / "pipeline_balanced", rank, (even, even), BALANCED_MICRO_BATCHES)
    dist.barrier()
    pipeline(out / "pipeline_few", rank, (even, even), FEW_MICRO_BATCHES, SHORT)
    dist.barrier()
    fsdp(out / "fsdp", rank)
    dist.barrier()
    fsdp(out / "fsdp_prefetch", rank, prefetch=True)
    dist.barrier()
    fsdp(out / "fsdp_slow_rank", rank, micro_steps=1,
         delay_s=SLOW_DELAY_S if rank == SLOW_RANK else 0.0, shape=(WIDTH, BATCH),
         steps=SLOW_STEPS)


if __name__ == "__main__":
    two_ranks.run(jobs)
