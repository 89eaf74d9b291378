"""A two-rank gloo job on CPU where one rank is slow before every all_reduce.

Run with ``torchrun --standalone --nproc_per_node=2 gloo_straggler.py OUT_DIR [SLOW_RANK]``;
each rank writes ``OUT_DIR/rank{R}.json`` with torch.profiler.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

#: How long the slow rank sleeps before each step's all_reduce.
DELAY_S = 0.03
STEPS = 6


def main() -> None:
    out, slow = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(256, 256)
    x = torch.randn(64, 256)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=1, warmup=1, active=STEPS - 2)) as prof:
        for _ in range(STEPS):
            model(x).sum().backward()
            if rank == slow:
                time.sleep(DELAY_S)
            for p in model.parameters():
                dist.all_reduce(p.grad)
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
