"""Two-rank DDP training over gloo on CPU, recorded with torch.profiler, in one of two shapes.

``torchrun --standalone --nproc_per_node=2 ddp.py OUT_DIR MODE`` writes ``OUT_DIR/rank{R}.json``:

* ``comm``: a large model (a 16 M-parameter embedding table) on a tiny batch: the gradient
  all-reduce dwarfs the compute and cannot hide under a backward pass that short;
* ``straggler``: a small model, and rank 1's dataset does slow pure-Python work per batch,
  so rank 0 waits for it in every all-reduce.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workloads import ACTIVE, SLOW_DATA_WORK, WAIT, WARMUP, Batches, mlp  # noqa: E402

#: The large model of the comm run: an embedding table of ROWS x DIM parameters (64 MB of
#: gradients to all-reduce every step) feeding a linear head; little compute per parameter.
ROWS = 1_000_000
DIM = 16
TOKENS = 8


class LargeModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = nn.Embedding(ROWS, DIM)
        self.head = nn.Linear(DIM, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = (x[:, :TOKENS].abs() * ROWS).long() % ROWS  # the features as token ids
        return self.head(self.table(tokens).mean(dim=1))


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(LargeModel() if mode == "comm" else mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    work = SLOW_DATA_WORK if mode == "straggler" and rank == 1 else 0
    data = Batches(WAIT + WARMUP + ACTIVE, work)
    if mode == "comm":
        data.x, data.y = data.x[:, :2], data.y[:, :2]  # a tiny batch
    loader = DataLoader(data, batch_size=None, num_workers=0)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)) as prof:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.destroy_process_group()
    # torch 2.13 sometimes aborts at interpreter exit after a profiled gloo job ("terminate
    # called without an active exception" from a C++ thread destructor, no Python frame),
    # after the trace is written: leave without running the static destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
