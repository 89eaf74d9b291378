"""A small gloo DDP job recorded with ``trainprof.profile``, for the cluster summary tests.

``torchrun --standalone --nproc_per_node=N cluster_job.py OUT_DIR MODE``:

* ``slow-data``: rank 1's dataset sleeps ``DATA_DELAY_S`` per batch (a slow data loader);
* ``no-show``: rank 1 fails inside the recorded loop and leaves without meeting the others,
  which wait ``TIMEOUT_S`` for it;
* ``rank-0-only``: only rank 0 records with trainprof (the others train unrecorded).
"""

from __future__ import annotations

import contextlib
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import trainprof

DATA_DELAY_S = 0.03
STEPS = 6
SCHEDULE = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}
TIMEOUT_S = 3.0


class Batches(Dataset):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        gen = torch.Generator().manual_seed(i)
        return torch.randn(16, 32, generator=gen), torch.randint(0, 4, (16,), generator=gen)


class Unrecorded:
    def step(self) -> None:
        pass


def train(out: str, mode: str, rank: int) -> None:
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    slow = mode == "slow-data" and rank == 1
    loader = DataLoader(Batches(DATA_DELAY_S if slow else 0.0), batch_size=None)
    recorded = rank == 0 or mode != "rank-0-only"
    recorder = trainprof.profile(output_trace_dir=out, schedule_option=SCHEDULE,
                                 cluster_summary_timeout_s=TIMEOUT_S)
    with recorder if recorded else contextlib.nullcontext(Unrecorded()) as prof:
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
            if mode == "no-show" and rank == 1 and i == STEPS - 1:
                raise RuntimeError("rank 1 fails after its last step")


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        train(out, mode, rank)
    except RuntimeError as error:
        print(f"rank {rank}: {error}", file=sys.stderr)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
