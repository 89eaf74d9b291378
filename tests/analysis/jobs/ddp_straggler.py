"""Two-rank DDP jobs over gloo on CPU, each recorded with torch.profiler: a compute straggler
hidden by DDP's all-reduce, and its balanced control.

``python ddp_straggler.py OUT_DIR`` starts two processes (torch.multiprocessing, gloo on
127.0.0.1) that run, one after the other in the same process group, and write
``OUT_DIR/JOB/rank{R}.json``:

* ``ddp_slow``: DDP over a small MLP whose forward stands for COMPUTE_S of compute (a sleep) on
  every rank, and on rank 1 for DELAY_S more (a rank with slower compute): rank 0 then waits
  for it in the first gradient all-reduce of every step;
* ``ddp_balanced``: the same job with no delay (the healthy control).

The compute is mostly a sleep, not matmuls: two ranks computing on a shared 2-core machine
slow each other down unevenly (a balanced pair of ranks came out 10-20 ms apart in 70 ms
steps), and the test needs the built-in delay to be the only difference.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import two_ranks  # this folder's: the script's folder is on sys.path

#: Every rank's forward sleeps COMPUTE_S; the slow rank's DELAY_S more.
COMPUTE_S = 0.15
SLOW_RANK = 1
DELAY_S = 0.05
WIDTH = 256
BATCH = 64
LAYERS = 4
#: Small buckets, so that DDP all-reduces several buckets during backward.
BUCKET_CAP_MB = 0.3
WAIT, WARMUP, ACTIVE = 1, 1, 4


class Net(nn.Module):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(LAYERS)
                                    for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())])
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)  # this rank's compute
        return self.body(x)


def job(out: Path, rank: int, delay_s: float) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(Net(delay_s), bucket_cap_mb=BUCKET_CAP_MB)
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, WIDTH)

    def step() -> None:
        model(x).square().mean().backward()
        optim.step()
        optim.zero_grad()

    two_ranks.profiled(step, out, rank, (WAIT, WARMUP, ACTIVE))


def jobs(rank: int, out: Path) -> None:
    job(out / "ddp_slow", rank, COMPUTE_S + (DELAY_S if rank == SLOW_RANK else 0.0))
    dist.barrier()
    job(out / "ddp_balanced", rank, COMPUTE_S)


if __name__ == "__main__":
    two_ranks.run(jobs)
