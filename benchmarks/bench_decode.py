"""Decode one trace serially and on several cores: time, CPU, peak memory, and the projection.

    .venv/bin/python benchmarks/bench_decode.py [TRACE] [--workers 1 2] [--repeat 1] [--analyze]
        [--phases]

Each round runs, each in a fresh process and interleaved: the serial read (``load_file`` with
one worker), then the parallel read (trace/parallel_decode.py) with each ``--workers`` count
(1 worker still overlaps this process's reading and cutting with the worker's decoding).
``--analyze`` times ``trainprof.analyze()`` as well (serial, then with the most workers), and
``--phases`` the load and the analysis of one trace separately, in one process.
From the parallel times at 1 and 2 workers, T(n) = s + p/n gives the serial part s and the
parallel part p, and the speed-up projected at 16 workers (Amdahl). Figures go to
``benchmarks/out/decode.json``.
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
mode, n, path, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
start = time.perf_counter()
phases = {}
if mode == "analyze":
    os.environ["TRAINPROF_DECODE_WORKERS"] = str(n)
    import trainprof
    events = len(trainprof.analyze(path).ranks)
elif mode == "phases":
    from trainprof.analysis.analyze import analyze_trace
    from trainprof.trace.load import load_file
    cpu = time.process_time()
    trace = load_file(path, workers=n)
    phases = {"load_s": time.perf_counter() - start, "load_cpu_s": time.process_time() - cpu}
    analyze_trace(trace)
    phases.update(analysis_s=time.perf_counter() - start - phases["load_s"],
                  analysis_cpu_s=time.process_time() - cpu - phases["load_cpu_s"])
    events = len(trace.events)
else:
    from trainprof.trace.load import load_file
    from trainprof.trace.parallel_decode import decode_parallel
    if n == 0:
        events = len(load_file(path, workers=1).events)
    else:
        decoded = decode_parallel(path, n)
        assert decoded is not None, "fell back to the serial read"
        events = len(decoded[0][0])
wall = time.perf_counter() - start
me = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
out.write_text(json.dumps({"work_s": wall, "events": events,
    "parent_cpu_s": me.ru_utime + me.ru_stime,
    "workers_cpu_s": kids.ru_utime + kids.ru_stime,
    "workers_peak_rss_mib": kids.ru_maxrss / 1024, **phases}))
"""

PROJECT_AT = 16


def run_child(mode: str, workers: int, trace: Path, timeout: float) -> dict:
    return run_child_script(CHILD, "decode", mode, workers, trace, timeout)


def amdahl(t1: float, t2: float, serial_s: float) -> dict:
    """T(n) = s + p/n through the parallel times at 1 and 2 workers."""
    p = 2 * (t1 - t2)
    s = max(t1 - p, 0.0)
    projected = s + p / PROJECT_AT
    return {"serial_part_s": s, "parallel_part_s": p,
            "serial_share": s / (s + p) if s + p else None,
            f"projected_s_at_{PROJECT_AT}": projected,
            f"speedup_at_{PROJECT_AT}": serial_s / projected if projected else None,
            "speedup_limit": serial_s / s if s else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, nargs="?", default=REFERENCE_TRACE)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--analyze", action="store_true")
    parser.add_argument("--phases", action="store_true",
                        help="also load then analyse in one process, serially and in parallel, "
                             "timing each phase")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=OUT_DIR / "decode.json")
    args = parser.parse_args(argv)
    cache_bytecode()  # start-up as an installed package's (measure.py)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    plan = [("load", 0)] + [("load", n) for n in args.workers]
    if args.analyze:
        plan += [("analyze", 1), ("analyze", max(args.workers))]
    if args.phases:
        plan += [("phases", 1), ("phases", max(args.workers))]
    runs: dict[str, list[dict]] = {f"{m}-{n}": [] for m, n in plan}
    for i in range(args.repeat):
        for mode, n in plan:
            key = f"{mode}-{n}"
            figures = run_child(mode, n, args.trace, args.timeout)
            runs[key].append(figures)
            print(f"round {i + 1}: {key:<10} {figures['work_s']:7.2f} s in-process, "
                  f"{figures['process_s']:7.2f} s process, parent CPU {figures['parent_cpu_s']:6.2f} s, "
                  f"workers CPU {figures['workers_cpu_s']:6.2f} s, peak RSS "
                  f"{figures['peak_rss_mib']:,.0f} MiB" + (
                      f"; load {figures['load_s']:.1f} s, analysis {figures['analysis_s']:.1f} s"
                      if "load_s" in figures else ""), flush=True)
    best = {k: min(r["work_s"] for r in v) for k, v in runs.items()}
    serial = best["load-0"]
    report = {
        "schema": "trainprof.bench.decode/1",
        "trace": relative(args.trace.resolve()),
        "machine": machine_info(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "best_work_s": best,
        "speedup": {k: serial / v for k, v in best.items() if k.startswith("load-")},
        "runs": runs,
    }
    if 1 in args.workers and 2 in args.workers:
        report["amdahl"] = amdahl(best["load-1"], best["load-2"], serial)
    if args.analyze:
        report["analyze_speedup"] = best["analyze-1"] / best[f"analyze-{max(args.workers)}"]
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("best_work_s", "speedup", "amdahl",
                                             "analyze_speedup", "load_average") if k in report},
                     indent=1))
    print(f"written: {relative(args.out.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
