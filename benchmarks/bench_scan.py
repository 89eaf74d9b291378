"""The compiled scanner against msgspec alone: ``load_file`` CPU time, in one process.

    .venv/bin/python benchmarks/bench_scan.py [TRACE] [--repeat 5] [--workers 1]

Each round loads the trace with ``TRAINPROF_PURE_PYTHON=1`` (msgspec, then
``ColumnBuilder.add``) and without it (trace/_scan.c, then numpy), in alternating order, and
records this process's CPU time (``time.process_time``), the decode workers' (``os.times``)
and the wall time. Prints the minimum of each and the CPU ratio; figures go to
``benchmarks/out/scan.json``. docs/performance.md, "The compiled scanner".
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

from measure import OUT_DIR, REFERENCE_TRACE, machine_info
from trainprof.trace import scan
from trainprof.trace.load import load_file


def one_load(path: Path, workers: int, pure: bool) -> dict[str, float]:
    """CPU and wall seconds of one ``load_file``."""
    os.environ["TRAINPROF_PURE_PYTHON"] = "1" if pure else "0"
    before, cpu, wall = os.times(), time.process_time(), time.perf_counter()
    trace = load_file(path, workers=workers)
    after = os.times()
    out = {
        "cpu_s": time.process_time() - cpu,
        "workers_cpu_s": (after.children_user + after.children_system)
        - (before.children_user + before.children_system),
        "wall_s": time.perf_counter() - wall,
        "events": len(trace.events),
    }
    del trace
    gc.collect()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=REFERENCE_TRACE)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if not scan.available():
        raise SystemExit("The compiled scanner is not built: run `make setup`.")
    runs: dict[str, list[dict[str, float]]] = {"msgspec": [], "scanner": []}
    for i in range(args.repeat):
        order = ("msgspec", "scanner") if i % 2 == 0 else ("scanner", "msgspec")
        for mode in order:
            runs[mode].append(one_load(args.trace, args.workers, mode == "msgspec"))
    best = {mode: {k: min(r[k] for r in rs) for k in ("cpu_s", "workers_cpu_s", "wall_s")}
            for mode, rs in runs.items()}
    for mode, b in best.items():
        print(f"{mode:8s} CPU {b['cpu_s']:.3f} s + workers {b['workers_cpu_s']:.3f} s, "
              f"wall {b['wall_s']:.3f} s (min of {args.repeat})")
    total = {mode: b["cpu_s"] + b["workers_cpu_s"] for mode, b in best.items()}
    print(f"CPU ratio msgspec / scanner: {total['msgspec'] / total['scanner']:.2f}x")
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "scan.json").write_text(json.dumps(
        {"trace": str(args.trace), "workers": args.workers, "runs": runs, "best": best,
         "machine": machine_info()}, indent=2))


if __name__ == "__main__":
    main()
