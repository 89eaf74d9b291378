"""The critical path section's CPU time against another revision's, in one process, interleaved.

    python benchmarks/bench_critical_path_cpu.py [TRACE] [--against main] [--repeat 5]

The other revision's ``trainprof/analysis/critical_path`` package is read with ``git show``
into a temporary folder under another name (its own imports renamed), so both run on the same
loaded trace, one call each in turn (a machine shared with other work slows both alike). Both
results must be equal, or it says so and exits 1. Times are CPU seconds (``process_time``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from trainprof.analysis.critical_path import critical_path
from trainprof.analysis.overview.steps import find_steps
from trainprof.trace.load import load_file

REFERENCE = "tests/data/traces/hta/tests/data/df_index_resolver/df_index_resolver.json.gz"
PACKAGE = "src/trainprof/analysis/critical_path"
OLD_NAME = "critical_path_against"


def old_package(rev: str, folder: Path) -> ModuleType:
    """The critical path package as it is at ``rev``, importable as OLD_NAME."""
    files = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{PACKAGE}"], check=True,
                           capture_output=True, text=True).stdout.split()
    target = folder / OLD_NAME
    target.mkdir()
    for name in files:
        if name.endswith(".py"):
            text = subprocess.run(["git", "show", f"{rev}:{PACKAGE}/{name}"], check=True,
                                  capture_output=True, text=True).stdout
            (target / name).write_text(text.replace("trainprof.analysis.critical_path",
                                                    OLD_NAME))
    sys.path.insert(0, str(folder))
    return importlib.import_module(OLD_NAME)


def as_json(result: Any) -> str:
    return json.dumps(result.to_dict(), sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=REFERENCE)
    parser.add_argument("--against", default="main", help="git revision to compare with")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--changed", action="store_true",
                        help="the results are meant to differ (a change of the path itself): "
                             "time both anyway and print each one's split")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        old = old_package(args.against, Path(folder)).critical_path
        trace = load_file(args.trace)
        steps = find_steps(trace)
        was, now = old(trace, steps), critical_path(trace, steps)  # warms caches
        if as_json(was) != as_json(now):
            print(f"The results differ from {args.against}'s.")
            if not args.changed:
                raise SystemExit(1)
            for label, r in ((args.against, was), ("this tree", now)):
                print(f"  {label}: " + ", ".join(f"{k} {v:.1f}%" for k, v in r.split_pct.items()
                                                  if v >= 0.05))
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.repeat):
            for key, run in (("old", old), ("new", critical_path)):
                start = time.process_time()
                run(trace, steps)
                times[key].append(time.process_time() - start)
    before, after = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"{len(trace.events):,} events, {len(steps)} steps: critical_path CPU "
          f"{args.against} {before:.3f} s, this tree {after:.3f} s (medians of {args.repeat}, "
          f"interleaved): {after / before:.2f}x")


if __name__ == "__main__":
    main()
