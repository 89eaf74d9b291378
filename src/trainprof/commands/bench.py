"""``trainprof bench``: training strategies measured side by side (docs/bench.md)."""

from __future__ import annotations

import argparse

from trainprof.commands.bench_api import bench_api
from trainprof.errors import TrainprofError


def main(args: argparse.Namespace) -> int:
    """Run the strategies asked for and write their table."""
    from trainprof.bench.render import BenchProgress, print_bench, write_result

    if args.timeout is not None and not args.isolate:
        raise TrainprofError("--timeout needs --isolate (a strategy can only be stopped in a "
                             "process of its own).")

    compare = bench_api("trainprof.bench.benchmark", "compare")
    with BenchProgress() as progress:
        result = compare(args.strategies.split(",") if args.strategies else None,
                         workload=bench_api("trainprof.bench.workload", "workload_for")(
                             args.workload, args.demo),
                         steps=args.steps, warmup=args.warmup, repeats=args.repeats,
                         device=args.device, isolate=args.isolate, timeout_s=args.timeout,
                         baseline=args.baseline, recheck=not args.no_recheck,
                         on_start=progress.on_start)
    write_result(result, args.format, args.output, print_bench)
    return 0
