"""What ``StepTimer(log_to=...)`` adds per step, at steps of about 5 ms on the CPU.

Each round trains three short runs: a StepTimer without trackers, one with ``log_to`` (a fresh
timer each run: trackers opened, every step sent, closed), and again without, so that drift in
the machine's speed cancels. Reported: the median over rounds of timed-with / mean(without) - 1,
with a bootstrap 95% interval, and the control (second without / first without - 1, the noise
floor). TensorBoard by default: it needs no server, and its writer thread competes with the
training thread for the interpreter as any tracker's would.

    python benchmarks/bench_tracker_overhead.py [--rounds 30] [--steps 40] [--tracker tensorboard]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step_timer import (  # noqa: E402
    BATCH,
    FEATURES,
    build,
    forever,
    median_with_interval,
    pick_width,
    train,
)
from trainprof.capture.steps import StepTimer  # noqa: E402


def timed(model, optimizer, data, steps: int, log_to: str | None) -> float:
    """Wall seconds for ``steps`` steps under a StepTimer, closing it included."""
    start = time.perf_counter()
    with StepTimer(model, optimizer, flops_per_step=1.0, log_every=None, log_to=log_to) as timer:
        train(model, optimizer, timer.wrap(data).__next__, steps)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=40, help="steps per run")
    parser.add_argument("--tracker", default="tensorboard")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    data = [(torch.randn(BATCH, FEATURES), torch.randint(0, 10, (BATCH,))) for _ in range(16)]
    width = pick_width(data)
    model, optimizer = build(width)
    stream = forever(data)
    train(model, optimizer, stream.__next__, 10)
    with tempfile.TemporaryDirectory() as folder:
        os.environ["TENSORBOARD_LOGDIR"] = folder
        rounds = []
        for _ in range(args.rounds):
            rounds.append((timed(model, optimizer, stream, args.steps, None),
                           timed(model, optimizer, stream, args.steps, args.tracker),
                           timed(model, optimizer, stream, args.steps, None)))
    step_ms = statistics.median(r[0] for r in rounds) / args.steps * 1e3
    overhead = [t / ((a + b) / 2) - 1 for a, t, b in rounds]
    control = [b / a - 1 for a, _, b in rounds]
    cost_us = [(t - (a + b) / 2) / args.steps * 1e6 for a, t, b in rounds]
    mid, low, high = median_with_interval(overhead)
    c_mid, c_low, c_high = median_with_interval(control)
    print(f"torch {torch.__version__}, 1 thread, width {width}, timed step {step_ms:.2f} ms, "
          f"{args.rounds} rounds of {args.steps}-step runs, log_to={args.tracker!r}")
    print(f"tracker overhead {mid:+.2%} (95% CI {low:+.2%} .. {high:+.2%}), "
          f"{statistics.median(cost_us):+.0f} us/step (opening and closing included); "
          f"control {c_mid:+.2%} (95% CI {c_low:+.2%} .. {c_high:+.2%})")


if __name__ == "__main__":
    main()
