"""The run history and the live view, measured: writes, regression detection, redraw cost.

1. Writes: rows/s from one process, and from 8 processes writing 25 rows each at once (every
   row through ``trainprof.history.record``, a connection per row, as ranks do); rows lost.
2. Regression detection on simulated series (``history.views.regress``): 30 runs per series, a step
   change at run 19 in some; per regime, how often the change is flagged at run 19, and false
   alarms per judged run (flags anywhere else).
3. The live view's cost: a CPU training loop of about 5 ms steps with a StepTimer, the view
   redrawing to a terminal (rich, discarded output) every 0.1 s, against the same loop without
   it, in interleaved rounds; the cost per redraw, and what it is at the default interval.

    python benchmarks/bench_history.py [--seeds 200] [--rounds 20]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import trainprof.history as history
from trainprof.history.store.rows import RunRecord
from trainprof.history.views.regress import series_of

SUMMARY = {"steps": 100, "device": "cpu", "phases_ms": {"data": 1.0, "forward": 2.0},
           "step_ms": {"mean": 10.0, "median": 9.8, "p90": 11.0, "min": 9.0, "max": 14.0},
           "samples_per_s": 3200.0}
#: (name, level after the change / before, steps per run, step noise, run-to-run noise).
REGIMES = (
    ("12% step, 40 steps, quiet", 1.12, 40, 0.08, 0.01),
    ("10% step, 200 steps, 2% run noise", 1.10, 200, 0.10, 0.02),
    ("20% step, 200 steps, 3% run noise", 1.20, 200, 0.10, 0.03),
    ("15% step, 3 steps (a trace), 2% run noise", 1.15, 3, 0.05, 0.02),
    ("no change, 40 steps, quiet", 1.0, 40, 0.08, 0.01),
    ("no change, 200 steps, 3% run noise", 1.0, 200, 0.10, 0.03),
    ("no change, 10 steps, 15% step noise", 1.0, 10, 0.15, 0.03),
)
CHANGE_AT, RUNS = 18, 30


def _writer(db: str, rows: int, barrier) -> None:  # noqa: ANN001
    barrier.wait()
    for _ in range(rows):
        history.record(SUMMARY, name="bench", db=db, git_commit="x")


def writes() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "h.db")
        history.record(SUMMARY, name="bench", db=db, git_commit="x")  # created, migrated
        start = time.perf_counter()
        for _ in range(200):
            history.record(SUMMARY, name="bench", db=db, git_commit="x")
        serial = 200 / (time.perf_counter() - start)
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(8)
        procs = [ctx.Process(target=_writer, args=(db, 25, barrier)) for _ in range(8)]
        for p in procs:
            p.start()
        start = time.perf_counter()
        for p in procs:
            p.join()
        wall = time.perf_counter() - start
        with sqlite3.connect(db) as conn:
            count = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    print(f"writes: one process {serial:.0f} rows/s; 8 processes x 25 rows at once: "
          f"{200 / wall:.0f} rows/s, {1 + 200 + 200 - count} rows lost")


def detection(seeds: int) -> None:
    print(f"regression detection, {seeds} series of {RUNS} runs each, change at run "
          f"{CHANGE_AT + 1}:")
    for name, after, steps, step_noise, run_noise in REGIMES:
        at_change = elsewhere = judged = 0
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            rows = []
            for i in range(RUNS):
                level = (1.0 if i < CHANGE_AT else after) * 100 * (1 + rng.normal(0, run_noise))
                times = level * rng.lognormal(0, step_noise, steps)
                rows.append(RunRecord(name="s", kind="k", recorded_at=float(i), id=i + 1,
                                      step_times_ms=times.tolist(),
                                      step_ms_median=float(np.median(times))))
            (series,) = series_of(rows)
            flagged = [p.ids[0] for p, _ in series.flagged()]
            at_change += (CHANGE_AT + 1) in flagged and after != 1.0
            elsewhere += sum(f != CHANGE_AT + 1 or after == 1.0 for f in flagged)
            judged += sum(v.status not in ("first", "baseline") for v in series.verdicts)
        rate = f"{at_change / seeds:6.1%}" if after != 1.0 else "     -"
        print(f"  {name:44s} flagged at the change {rate}, false alarms "
              f"{elsewhere / judged:.3%} of {judged} judged runs")


def live_cost(rounds: int) -> None:
    import torch
    from rich.console import Console

    from trainprof.capture.live import REFRESH_S, LiveView
    from trainprof.capture.steps import StepTimer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(8)]

    class CountedView(LiveView):
        redraws = 0

        def show(self, final: bool = False) -> None:
            self.redraws += 1
            super().show(final)

    def run(live: bool, steps: int = 200) -> tuple[float, int]:
        timer = StepTimer(model, optimizer, log_every=None, flops_per_step=1.0)
        view = None
        if live:
            sink = open(os.devnull, "w")  # noqa: SIM115
            view = CountedView(timer, console=Console(file=sink, force_terminal=True, width=120),
                               every_s=0.1)
            timer._live = view
        start = time.perf_counter()
        for x, y in timer.wrap([data[i % len(data)] for i in range(steps)]):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        wall = time.perf_counter() - start
        timer.close()
        return wall, view.redraws if view is not None else 0

    run(False)
    pairs = [(run(False), run(True), run(False)) for _ in range(rounds)]
    extra = [t[0] - (a[0] + b[0]) / 2 for a, t, b in pairs]
    per_redraw_ms = statistics.median(e / max(t[1], 1) for e, (_, t, _) in zip(extra, pairs,
                                                                                 strict=True)) * 1e3
    step_ms = statistics.median(a[0] for a, _, _ in pairs) / 200 * 1e3
    ratio = statistics.median(t[0] / ((a[0] + b[0]) / 2) for a, t, b in pairs)
    print(f"live view: {step_ms:.1f} ms steps; redrawing every 0.1 s costs {ratio - 1:+.2%} "
          f"of the loop's time, {per_redraw_ms:.1f} ms per redraw: {per_redraw_ms / 1e3 / REFRESH_S:.2%} "
          f"at the default {REFRESH_S:g} s interval")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    writes()
    detection(args.seeds)
    live_cost(args.rounds)


if __name__ == "__main__":
    main()
