"""StepTimer overhead on a CPU training loop with steps of about 5 ms.

One model trains in short runs that alternate bare and timed (a fresh StepTimer per timed run:
loader wrapped, hooks registered, then closed, so that cost is counted too). Each round runs
bare, timed, bare (the timed run in the middle, so that drift in the machine's speed cancels)
and gives two numbers:

- overhead: timed / mean(bare, bare) - 1;
- control: second bare / first bare - 1, the same measurement with no timer at all. Its spread
  is the noise floor of this machine; on a shared machine it is wider than 1%.

Both are reported as the median over rounds with a bootstrap 95% interval, in wall time and in
this process's CPU time. One intra-op thread by default, for steadier timings. Target: <= 1%.

    python benchmarks/bench_step_timer.py [--rounds 300] [--steps 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from trainprof.capture.steps import StepTimer

TARGET_STEP_MS = 5.0
BATCH = 64
FEATURES = 256


def build(width: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def forever(data: list) -> Iterator:
    while True:
        yield from data


def train(model, optimizer, fetch: Callable[[], tuple], steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds for `steps` training steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        x, y = fetch()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - wall, time.process_time() - cpu


def timed_train(model, optimizer, data: Iterator, steps: int) -> tuple[float, float]:
    # FLOPs given: a long run counts them once, which a 10-step run should not pay every time.
    with StepTimer(model, optimizer, flops_per_step=1.0, log_every=None) as timer:
        return train(model, optimizer, timer.wrap(data).__next__, steps)


def pick_width(data: list) -> int:
    """The hidden width whose step takes about TARGET_STEP_MS on this machine."""
    width = 512
    for _ in range(6):
        model, optimizer = build(width)
        fetch = forever(data).__next__
        train(model, optimizer, fetch, 5)
        step_ms = train(model, optimizer, fetch, 20)[0] / 20 * 1e3
        if abs(step_ms - TARGET_STEP_MS) < 0.5:
            break
        width = max(64, int(width * (TARGET_STEP_MS / step_ms) ** 0.5))
    return width


def median_with_interval(values: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    """The median and a bootstrap 95% interval for it."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), medians[int(0.025 * resamples)], medians[int(0.975 * resamples)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--steps", type=int, default=10, help="steps per run")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    torch.manual_seed(1)
    data = [(torch.randn(BATCH, FEATURES), torch.randint(0, 10, (BATCH,))) for _ in range(16)]
    width = pick_width(data)
    model, optimizer = build(width)
    stream = forever(data)
    train(model, optimizer, stream.__next__, 10)  # warm the allocator and the optimizer state

    rounds = []
    for _ in range(args.rounds):
        first = train(model, optimizer, stream.__next__, args.steps)
        timed = timed_train(model, optimizer, stream, args.steps)
        second = train(model, optimizer, stream.__next__, args.steps)
        rounds.append((first, timed, second))

    step_ms = statistics.median(r[0][0] for r in rounds) / args.steps * 1e3
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), hidden width {width}, "
          f"bare step {step_ms:.2f} ms, {args.rounds} rounds of {args.steps}-step runs")
    for clock, name in ((0, "wall"), (1, "CPU")):
        overhead = [t[clock] / ((a[clock] + b[clock]) / 2) - 1 for a, t, b in rounds]
        control = [b[clock] / a[clock] - 1 for a, _, b in rounds]
        cost_us = [(t[clock] - (a[clock] + b[clock]) / 2) / args.steps * 1e6 for a, t, b in rounds]
        mid, low, high = median_with_interval(overhead)
        c_mid, c_low, c_high = median_with_interval(control)
        print(f"{name:4s}: StepTimer overhead {mid:+.2%} (95% CI {low:+.2%} .. {high:+.2%}), "
              f"{statistics.median(cost_us):+.0f} us/step; control, no timer: {c_mid:+.2%} "
              f"(95% CI {c_low:+.2%} .. {c_high:+.2%})")


if __name__ == "__main__":
    main()
