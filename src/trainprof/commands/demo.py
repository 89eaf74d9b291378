"""``trainprof demo``: record a small built-in training job on the CPU and analyse it."""

from __future__ import annotations

import argparse

from trainprof.commands.analyze import analyze_with_progress
from trainprof.commands.quiet import quiet_profiler
from trainprof.formatting import counted


def main(args: argparse.Namespace) -> int:
    """Train, record, analyse, save the JSON result and print the report, opening on the
    verdict (the findings) like every report."""
    from rich.console import Console

    quiet_profiler(args.verbose)

    from trainprof.demo import record_demo
    from trainprof.report.json import write_json
    from trainprof.report.terminal.report import print_analysis

    console = Console()
    console.print(f"Training a small model on the CPU for {counted(args.steps, 'step')}, with the profiler on…")
    trace_dir = record_demo(args.out / "traces", steps=args.steps)
    analysis = analyze_with_progress(trace_dir, show_progress=True)
    result = write_json(analysis, args.out / "analysis.json")
    console.print(f"Traces in {trace_dir}/, the JSON result in {result}.")
    print_analysis(analysis, console)
    return 0
