"""Memory tools' costs, as ratios to a floor measured in the same run.

1. Reading a snapshot safely: the restricted unpickler (trace/snapshot.py) against a plain
   `pickle.loads` of the same bytes (the floor: what `--trust` does).
2. Analysing it: `analyze_snapshot` + findings against the same `pickle.loads`, on a synthetic
   snapshot the size of a long recorded window (`--entries` history entries, shared stacks, as
   torch writes them), and against torch's own `_memory_viz.segsum` of the same snapshot.
3. The memory breakdown's one-time count (`capture.memory_breakdown.tally`) of a model with
   `--layers` Linear layers and its Adam state, against one optimizer step of that model.

Medians over `--repeat` runs, interleaved. Timings are this machine's; the ratios are the point.

    python benchmarks/bench_memory.py [--entries 100000] [--layers 100] [--repeat 7]
"""

from __future__ import annotations

import argparse
import pickle
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

MiB = 1 << 20


def synthetic_snapshot(entries: int, seed: int = 0) -> dict[str, Any]:
    """Segments of blocks, and a history of `entries` alloc/free entries with shared stacks."""
    rng = random.Random(seed)
    stacks = [[{"filename": f"/job/model_{i % 17}.py", "line": 10 + i, "name": "forward"},
               {"filename": "/venv/site-packages/torch/nn/modules/module.py", "line": 1762,
                "name": "_call_impl"}, {"filename": "/job/train.py", "line": 40 + i % 5,
                                         "name": "train_step"}] for i in range(200)]
    segments, address = [], 0x7F0000000000
    for _ in range(200):
        blocks = []
        for b in range(25):
            state = ("active_allocated", "inactive")[rng.random() < 0.4]
            size = rng.choice((512, 4096, MiB, 2 * MiB, 8 * MiB))
            blocks.append({"address": address, "size": size, "requested_size": size - 32 * (b % 3),
                           "state": state, "frames": rng.choice(stacks) if state != "inactive" else []})
            address += size
        segments.append({"device": 0, "address": blocks[0]["address"], "stream": 0,
                         "total_size": sum(b["size"] for b in blocks), "segment_type": "large",
                         "is_expandable": False, "blocks": blocks})
    trace, live, t = [], [], 1_000_000
    annotations, step = [], 0
    for i in range(entries):
        t += rng.randint(1, 20)
        if i % (entries // 20 or 1) == 0:
            if step:
                annotations.append({"name": f"ProfilerStep#{step - 1}", "stage": "END", "time_us": t})
            annotations.append({"name": f"ProfilerStep#{step}", "stage": "START", "time_us": t})
            step += 1
        if live and (rng.random() < 0.5 or len(live) > 500):
            addr, size, frames = live.pop(rng.randrange(len(live)))
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                              "time_us": t, "frames": frames})
        else:
            entry = (0x7F0000000000 + i * 4096, rng.choice((4096, MiB, 4 * MiB)), rng.choice(stacks))
            live.append(entry)
            trace.append({"action": "alloc", "addr": entry[0], "size": entry[1], "stream": 0,
                          "time_us": t, "frames": entry[2]})
    annotations.append({"name": f"ProfilerStep#{step - 1}", "stage": "END", "time_us": t + 1})
    return {"segments": segments, "device_traces": [trace], "external_annotations": annotations}


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def snapshot_figures(entries: int, repeat: int) -> None:
    from torch.cuda import _memory_viz

    from trainprof.analysis.snapshot.analyze import analyze_snapshot
    from trainprof.diagnose.snapshot import snapshot_findings
    from trainprof.trace.snapshot import _PlainDataUnpickler

    snapshot = synthetic_snapshot(entries)
    data = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
    loaded = pickle.loads(data)
    plain = median_time(lambda: pickle.loads(data), repeat)
    safe = median_time(lambda: _PlainDataUnpickler(data, "bench").load(), repeat)
    analysis = median_time(lambda: snapshot_findings(analyze_snapshot(loaded)), repeat)
    segsum = median_time(lambda: _memory_viz.segsum(loaded), repeat)
    print(f"snapshot: {len(data) / 1e6:.1f} MB pickle, {entries:,} history entries, "
          f"{sum(len(s['blocks']) for s in snapshot['segments']):,} blocks")
    print(f"  pickle.loads (floor)          {plain * 1e3:8.1f} ms")
    print(f"  restricted load               {safe * 1e3:8.1f} ms   {safe / plain:5.2f}x the floor")
    print(f"  analysis + findings           {analysis * 1e3:8.1f} ms   {analysis / plain:5.2f}x the floor")
    print(f"  torch _memory_viz.segsum      {segsum * 1e3:8.1f} ms   (segments summary only)")


def breakdown_figures(layers: int, repeat: int) -> None:
    import torch

    from trainprof.capture.memory_breakdown import tally

    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(layers)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64)

    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    step()
    count = median_time(lambda: tally(model, optimizer), repeat)
    one_step = median_time(step, repeat)
    tensors = sum(1 for _ in model.parameters())
    print(f"breakdown: {tensors} parameter tensors with Adam state")
    print(f"  one training step             {one_step * 1e3:8.2f} ms")
    print(f"  the one-time count            {count * 1e3:8.2f} ms   {count / one_step:5.2f}x a step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    snapshot_figures(args.entries, args.repeat)
    breakdown_figures(args.layers, args.repeat)


if __name__ == "__main__":
    main()
