"""``trainprof checklist``: data, forward, backward and optimizer timed on their own, shares out
of the usual range flagged (docs/bench.md)."""

from __future__ import annotations

import argparse

from trainprof.commands.bench_api import bench_api


def main(args: argparse.Namespace) -> int:
    """Time each phase of the workload and write the checklist."""
    from trainprof.bench.render import print_checklist, write_result

    checklist = bench_api("trainprof.bench.phase_timing", "checklist")
    result = checklist(workload=bench_api("trainprof.bench.workload", "workload_for")(
        args.workload, args.demo), device=args.device, min_run_time_s=args.min_time)
    write_result(result, args.format, args.output, print_checklist)
    return 0
