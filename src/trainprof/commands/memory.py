"""``trainprof memory``: a CUDA memory snapshot's fragmentation, an OOM's cause and the top
allocation sites, as text or JSON (docs/memory_snapshots.md)."""

from __future__ import annotations

import argparse

from trainprof.fileio import write_or_print


def main(args: argparse.Namespace) -> int:
    """Diagnose ``args.snapshot`` and write the report."""
    from trainprof.diagnose.snapshot import memory_snapshot_report

    report = memory_snapshot_report(args.snapshot, trust=args.trust)
    if args.format == "json":
        from trainprof.report.json import to_json_bytes

        write_or_print(to_json_bytes(report).decode(), args.output)
        return 0
    from trainprof.fileio import print_or_save
    from trainprof.report.terminal.snapshot import print_memory_report

    print_or_save(lambda console: print_memory_report(report, console), args.output)
    return 0
