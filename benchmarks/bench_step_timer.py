"""StepTimer overhead on CPU training loops with steps of a few ms, in short and long runs.

For each step length (``--step-ms``) one model is sized to take it, and for each run length
(``--steps``) it trains in rounds of bare, timed, bare runs (the timed run in the middle, so
that drift in the machine's speed cancels). A timed run is what a user pays: a fresh StepTimer
with its defaults (FLOPs counted once), the loader wrapped, hooks registered, then
``summary()`` and ``close()``. Each round gives:

- overhead: timed / mean(bare, bare) - 1, and the same difference in µs per step;
- control: second bare / first bare - 1, the same measurement with no timer at all. Its spread
  is the noise floor of this machine; on a shared machine it is wider than 1%.

Each is the median over rounds with a bootstrap 95% interval, in wall time and in this
process's CPU time. On a shared 2-core machine a 5 ms step varies by more than the timer's
cost, so the script also measures the timer's own per-step functions directly
(``--micro-steps``): between real bare training steps (so the caches are as cold as in
training) it calls, under one clock, everything a step calls into the timer (the loader's
``next()``, the forward, backward and optimizer hooks), and reports the median and mean per
step. That leaves out torch's dispatch of the hooks, which the hot-loop figure includes: a tiny
model's step (about 0.1 ms) with and without a timer, many times over.

    python benchmarks/bench_step_timer.py [--step-ms 5 2] [--steps 50 500] [--seconds 40]

One intra-op thread by default, for steadier timings. Target: < 20 µs of CPU a step.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from trainprof.capture.steps import StepTimer

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


def step(model, optimizer, x, y) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def bare_step(model, optimizer, x, y) -> None:
    """`step` with torch's own backward, which the timer does not listen to."""
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    getattr(torch.autograd.backward, "__wrapped__", torch.autograd.backward)(loss)
    optimizer.step()


def train(model, optimizer, fetch: Callable[[], tuple], steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds for `steps` training steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        x, y = fetch()
        step(model, optimizer, x, y)
    return time.perf_counter() - wall, time.process_time() - cpu


def timed_train(model, optimizer, data: Iterator, steps: int) -> tuple[float, float]:
    """A run as a user has it: set-up, the steps, summary() and close() (the timer's defaults)."""
    wall, cpu = time.perf_counter(), time.process_time()
    with StepTimer(model, optimizer, log_every=None) as timer:
        train(model, optimizer, timer.wrap(data).__next__, steps)
        timer.summary()
    return time.perf_counter() - wall, time.process_time() - cpu


def pick_width(data: list, step_ms: float) -> int:
    """The hidden width whose step takes about `step_ms` of CPU on this machine (CPU time and
    medians: on a shared machine the wall time of a few steps jumps with the neighbours)."""
    width = 512
    for _ in range(8):
        measured = bare_step_ms(width, data)
        if abs(measured - step_ms) < 0.1 * step_ms:
            break
        width = max(16, int(width * (step_ms / measured) ** 0.5))
    return width


def bare_step_ms(width: int, data: list) -> float:
    """The median CPU time of one bare step of the model of that width, in ms."""
    model, optimizer = build(width)
    fetch = forever(data).__next__
    train(model, optimizer, fetch, 5)
    return statistics.median(train(model, optimizer, fetch, 1)[1] for _ in range(30)) * 1e3


def median_with_interval(values: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    """The median and a bootstrap 95% interval for it."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return statistics.median(values), medians[int(0.025 * resamples)], medians[int(0.975 * resamples)]


def overhead_rounds(model, optimizer, data: list, steps: int, rounds: int) -> list[tuple]:
    stream = forever(data)
    train(model, optimizer, stream.__next__, 10)  # warm the allocator and the optimizer state
    result = []
    for _ in range(rounds):
        first = train(model, optimizer, stream.__next__, steps)
        timed = timed_train(model, optimizer, stream, steps)
        second = train(model, optimizer, stream.__next__, steps)
        result.append((first, timed, second))
    return result


def report_overhead(rounds: list[tuple], steps: int) -> None:
    for clock, name in ((0, "wall"), (1, "CPU")):
        overhead = [t[clock] / ((a[clock] + b[clock]) / 2) - 1 for a, t, b in rounds]
        control = [b[clock] / a[clock] - 1 for a, _, b in rounds]
        cost_us = [(t[clock] - (a[clock] + b[clock]) / 2) / steps * 1e6 for a, t, b in rounds]
        mid, low, high = median_with_interval(overhead)
        us, us_low, us_high = median_with_interval(cost_us)
        c_mid, c_low, c_high = median_with_interval(control)
        print(f"  {name:4s}: overhead {mid:+.2%} (95% CI {low:+.2%} .. {high:+.2%}), "
              f"{us:+.1f} µs/step (95% CI {us_low:+.1f} .. {us_high:+.1f}); "
              f"control, no timer: {c_mid:+.2%} (95% CI {c_low:+.2%} .. {c_high:+.2%})")


def micro(width: int, data: list, steps: int) -> tuple[list[float], list[float]]:
    """(wall µs, CPU µs) of the timer's own work in each step, called directly between real
    training steps of a twin model; the forward output is a real one."""
    model, optimizer = build(width)
    other = build(width)
    timer = StepTimer(model, optimizer, log_every=None)
    wrapped = timer.wrap(forever(data))
    x, y = data[0]
    output = model(x)  # opens nothing: no step before the loader's first next()
    args = (x,)
    wall_us, cpu_us = [], []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for i in range(steps):
        x, y = data[i % len(data)]
        bare_step(*other, x, y)  # a real step the timer does not see: it leaves the caches cold
        w0, c0 = clock(), cpu_clock()
        next(wrapped)
        timer._on_forward_start(model, args)
        timer._on_forward_end(model, args, output)
        timer.on_backward_start()
        timer.on_backward_end()
        timer._on_optimizer_start(optimizer, (), {})
        timer._on_optimizer_end(optimizer, (), {})
        c1, w1 = cpu_clock(), clock()
        wall_us.append((w1 - w0) / 1e3)
        cpu_us.append((c1 - c0) / 1e3)
    timer.close()
    return wall_us, cpu_us


def report_micro(wall_us: list[float], cpu_us: list[float]) -> None:
    clock_cost = _clock_pair_us()
    for values, name in ((wall_us, "wall"), (cpu_us, "CPU")):
        mid, low, high = median_with_interval(values)
        print(f"  {name:4s}: {mid:.1f} µs/step median (95% CI {low:.1f} .. {high:.1f}), "
              f"mean {statistics.fmean(values):.1f}, p90 {sorted(values)[int(0.9 * len(values))]:.1f}")
    print(f"  (the two clock reads around it cost about {clock_cost:.1f} µs, included)")


def _clock_pair_us(n: int = 20000) -> float:
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    start = clock()
    for _ in range(n):
        clock(), cpu_clock(), cpu_clock(), clock()
    return (clock() - start) / n / 1e3


def flop_count_ms(width: int, data: list) -> float:
    """How long the first read of `flops_per_step` takes after two steps: the FLOP count, where
    it runs outside the steps (where it ran inside the first step, nothing is left to do)."""
    model, optimizer = build(width)
    with StepTimer(model, optimizer, log_every=None) as timer:
        for x, y in itertools.islice(timer.wrap(forever(data)), 2):
            step(model, optimizer, x, y)
        start = time.perf_counter()
        timer.flops_per_step  # noqa: B018 (the read is the measurement)
        return (time.perf_counter() - start) * 1e3


def hot_loop(rounds: int = 30, steps: int = 200) -> tuple[float, float, float]:
    """µs per step the timer adds to a tiny model's step (median and 95% CI over rounds), with
    torch's dispatch of the hooks: bare, timed, bare rounds, CPU time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(8)]
    costs = []
    stream = forever(data)
    for _ in range(rounds):
        first = train(model, optimizer, stream.__next__, steps)[1]
        timer = StepTimer(model, optimizer, log_every=None, flops_per_step=1.0)
        wrapped = timer.wrap(stream)
        next(wrapped)  # set-up outside the timing: the steady cost only
        timed = train(model, optimizer, wrapped.__next__, steps)[1]
        timer.close()
        second = train(model, optimizer, stream.__next__, steps)[1]
        costs.append((timed - (first + second) / 2) / steps * 1e6)
    return median_with_interval(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-ms", type=float, nargs="+", default=[5.0, 2.0])
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 500], help="steps per run")
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="about how long each (step-ms, steps) pair runs; sets the rounds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per pair (overrides --seconds)")
    parser.add_argument("--micro-steps", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    torch.manual_seed(1)
    data = [(torch.randn(BATCH, FEATURES), torch.randint(0, 10, (BATCH,))) for _ in range(16)]
    for step_ms in args.step_ms:
        width = pick_width(data, step_ms)
        model, optimizer = build(width)
        bare_ms = bare_step_ms(width, data)
        print(f"\nsteps of {step_ms:g} ms: hidden width {width}, bare step {bare_ms:.2f} ms of CPU")
        for steps in args.steps:
            rounds = args.rounds or max(5, int(args.seconds / (3 * steps * bare_ms / 1e3)))
            print(f" {rounds} rounds of {steps}-step runs:")
            report_overhead(overhead_rounds(model, optimizer, data, steps, rounds), steps)
        print(f" the timer's own functions, called directly between {args.micro_steps} real steps:")
        report_micro(*micro(width, data, args.micro_steps))
    print(f"\nthe one-off FLOP count, at the first read of flops_per_step: {flop_count_ms(width, data):.1f} ms")
    mid, low, high = hot_loop()
    print(f"\nhot loop (tiny model, steady state, with torch's hook dispatch): "
          f"{mid:+.1f} µs/step of CPU (95% CI {low:+.1f} .. {high:+.1f})"
          f" [load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}]")


if __name__ == "__main__":
    main()
