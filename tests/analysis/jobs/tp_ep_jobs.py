"""Two-rank jobs over gloo on CPU, each recorded with torch.profiler: DTensor tensor parallelism
and an uneven all-to-all (expert parallelism's token exchange).

``python tp_ep_jobs.py OUT_DIR`` starts two processes (torch.multiprocessing, gloo on
127.0.0.1) that run, one after the other in the same process group, and write
``OUT_DIR/JOB/rank{R}.json``:

* ``tensor``: an MLP of LAYERS blocks (Linear up, ReLU, Linear down), each block's ``up``
  split with ``ColwiseParallel`` and ``down`` with ``RowwiseParallel`` over a 2-rank
  DeviceMesh (``parallelize_module``): each block's forward all-reduces its output and its
  backward all-reduces its input's gradient (DTensor's ``_c10d_functional::all_reduce``). Each
  block runs inside ``record_function("layers.i")``;
* ``expert``: ``dist.all_to_all_single`` with uneven splits, as a token dispatch whose experts
  compute on the tokens they receive: rank 1 receives HEAVY times the tokens of rank 0, so
  rank 0 waits for it in the next all-to-all.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import record_function

import two_ranks  # this folder's: the script's folder is on sys.path

WIDTH, HIDDEN, BATCH, LAYERS = 256, 1024, 64, 3
#: Tokens rank 0 receives per all-to-all, and how many times as many rank 1 receives.
TOKENS, HEAVY = 256, 4
EXPERT_WIDTH = 512
WAIT, WARMUP, ACTIVE = 1, 1, 3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, HIDDEN)
        self.down = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.layers):
            with record_function(f"layers.{i}"):
                x = block(x)
        return x


def tensor(out: Path, rank: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (2,))
    model = Mlp()
    plan = {}
    for i in range(LAYERS):
        plan[f"layers.{i}.up"] = ColwiseParallel()
        plan[f"layers.{i}.down"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, WIDTH, requires_grad=True)

    def step() -> None:
        model(x).square().mean().backward()
        optim.step()
        optim.zero_grad()

    two_ranks.profiled(step, out, rank, (WAIT, WARMUP, ACTIVE))


def expert(out: Path, rank: int) -> None:
    torch.manual_seed(rank)
    recv = [TOKENS, TOKENS * HEAVY]  # tokens each rank receives (its experts' load)
    # rank r sends recv[j] // 2 tokens to rank j (half from each rank)
    send_splits = [n // 2 for n in recv]
    recv_splits = [recv[rank] // 2] * 2
    weight = torch.randn(EXPERT_WIDTH, EXPERT_WIDTH)
    tokens = torch.randn(sum(send_splits), EXPERT_WIDTH)

    def step() -> None:
        got = torch.empty(sum(recv_splits), EXPERT_WIDTH)
        with record_function("dispatch"):
            dist.all_to_all_single(got, tokens, recv_splits, send_splits)
        for _ in range(4):  # the experts
            got = torch.relu(got @ weight)
        back = torch.empty(sum(send_splits), EXPERT_WIDTH)
        with record_function("combine"):
            dist.all_to_all_single(back, got, send_splits, recv_splits)

    two_ranks.profiled(step, out, rank, (WAIT, WARMUP, ACTIVE))


def jobs(rank: int, out: Path) -> None:
    tensor(out / "tensor", rank)
    dist.barrier()
    expert(out / "expert", rank)


if __name__ == "__main__":
    two_ranks.run(jobs)
