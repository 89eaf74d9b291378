"""The critical path section's memory: its tracemalloc peak above what the trace already holds,
and its time, on one trace (the 53 MB HTA reference by default).

Shared caches (the call tree) are warmed by a first, untraced call, so the peak is the
section's own; the time is the median of ``--repeat`` calls after it.

    python benchmarks/bench_critical_path_memory.py [TRACE] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

from trainprof.analysis.critical_path import critical_path
from trainprof.analysis.overview.steps import find_steps
from trainprof.trace.load import load_file

REFERENCE = "tests/data/traces/hta/tests/data/df_index_resolver/df_index_resolver.json.gz"
MiB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=REFERENCE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trace = load_file(args.trace)
    steps = find_steps(trace)
    critical_path(trace, steps)  # warms the shared caches
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        critical_path(trace, steps)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    critical_path(trace, steps)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{len(trace.events):,} events, {len(steps)} steps: critical_path peak "
          f"+{peak / MiB:.1f} MiB, {statistics.median(times) * 1000:.0f} ms (median of "
          f"{args.repeat})")


if __name__ == "__main__":
    main()
