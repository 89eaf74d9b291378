"""A loaded trace's sections on one process and on several (analysis/parallel/section_workers.py).

    .venv/bin/python benchmarks/bench_section_workers.py [TRACE] [--workers 1 2] [--repeat 3]

Each round runs, each in a fresh process and interleaved, for each ``--workers`` count (set as
TRAINPROF_SECTION_WORKERS): ``trainprof.analyze(TRACE)`` whole, then the load and the analysis
of the loaded trace (``analyze_trace``) timed apart in one process. Wall time, and CPU time of
the process and of its children (the forked section workers; in the whole run the decode
workers too). Figures go to ``benchmarks/out/section_workers.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from measure import (
    OUT_DIR,
    REFERENCE_TRACE,
    cache_bytecode,
    machine_info,
    relative,
    run_child_script,
)

CHILD = """
import json, os, resource, sys, time
from pathlib import Path
mode, n, path, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
os.environ["TRAINPROF_SECTION_WORKERS"] = n

def cpu():
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime

def since(before):
    now = cpu()
    return {"wall_s": now[0] - before[0], "cpu_s": now[1] - before[1],
            "children_cpu_s": now[2] - before[2]}

start = cpu()
if mode == "analyze":
    import trainprof
    trainprof.analyze(path)
    figures = since(start)
else:
    from trainprof.analysis.overview.rank import analyze_trace
    from trainprof.trace.load import load_file
    trace = load_file(path)
    figures = {"events": len(trace.events), "load": since(start)}
    mark = cpu()
    analyze_trace(trace)
    figures["analysis"] = since(mark)
out.write_text(json.dumps(figures))
"""


def run_child(mode: str, workers: int, trace: Path, timeout: float) -> dict:
    return run_child_script(CHILD, "sections", mode, workers, trace, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, nargs="?", default=REFERENCE_TRACE)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=OUT_DIR / "section_workers.json")
    args = parser.parse_args(argv)
    cache_bytecode()  # start-up as an installed package's (measure.py)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {}
    for i in range(args.repeat):
        for mode in ("analyze", "phases"):
            for n in args.workers:
                figures = run_child(mode, n, args.trace, args.timeout)
                runs.setdefault(f"{mode}-{n}", []).append(figures)
                shown = figures if mode == "analyze" else figures["analysis"]
                print(f"round {i + 1}: {mode}-{n:<3} "
                      + (f"load {figures['load']['wall_s']:6.2f} s, analysis " if mode == "phases"
                         else "whole ")
                      + f"{shown['wall_s']:6.2f} s wall, CPU {shown['cpu_s']:6.2f} s + children "
                      f"{shown['children_cpu_s']:6.2f} s; peak RSS {figures['peak_rss_mib']:,.0f} MiB",
                      flush=True)
    best = {k: min((r if k.startswith("analyze") else r["analysis"])["wall_s"] for r in v)
            for k, v in runs.items()}
    one, most = min(args.workers), max(args.workers)
    report = {
        "schema": "trainprof.bench.section_workers/1",
        "trace": relative(args.trace.resolve()),
        "machine": machine_info(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "best_wall_s": best,
        "speedup": {mode: best[f"{mode}-{one}"] / best[f"{mode}-{most}"]
                    for mode in ("analyze", "phases")},
        "runs": runs,
    }
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("best_wall_s", "speedup", "load_average")}, indent=1))
    print(f"written: {relative(args.out.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
