"""What the two-rank gloo jobs of this folder share (parallel_jobs.py, ddp_straggler.py,
tp_ep_jobs.py): ``run(jobs)`` starts two processes (torch.multiprocessing, spawn) in one gloo
process group on 127.0.0.1 and calls ``jobs(rank, OUT_DIR)`` in each, OUT_DIR being the
script's first argument; the jobs run one after the other, a barrier between them."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

Jobs = Callable[[int, Path], None]


def run(jobs: Jobs) -> None:
    mp.start_processes(_worker, args=(jobs, sys.argv[1], free_port()), nprocs=2,
                       start_method="spawn")


def _worker(rank: int, jobs: Jobs, out: str, port: int) -> None:
    torch.set_num_threads(1)
    # Gradients shrink through a pipeline's stages to denormal floats, which make a CPU matmul
    # several times slower on one stage only: flushed to zero, each layer costs the same.
    torch.set_flush_denormal(True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    jobs(rank, Path(out))
    dist.barrier()
    dist.destroy_process_group()
    # torch 2.13 can abort at exit after a profiled gloo job (a C++ thread destructor), after
    # the traces are written: leave without the static destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def profiled(run_step: Callable[[], None], out: Path, rank: int,
             steps: tuple[int, int, int]) -> None:
    """``run_step`` called wait + warmup + active times under torch.profiler (CPU), the active
    steps written to ``out/rank{rank}.json``."""
    wait, warmup, active = steps
    out.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1)) as prof:
        for _ in range(wait + warmup + active):
            run_step()
            prof.step()
    prof.export_chrome_trace(str(out / f"rank{rank}.json"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
