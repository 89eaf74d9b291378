"""One huge string in an event's args (issue 19): load time must grow linearly with its size.

    .venv/bin/python benchmarks/bench_huge_string.py [--mb 10 50 200]

For each size, a trace of 2,000 small ops plus one event whose args hold a string of that many
MiB is written to a temporary folder and loaded (``load_file``, in this process), then the same
file cut inside the string (unterminated), which must be called truncated. Prints the times and
the time per MiB, and writes ``benchmarks/out/huge_string.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from measure import OUT_DIR, REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "src"))

from trainprof.errors import TraceError  # noqa: E402
from trainprof.trace.load import load_file  # noqa: E402


def trace_text(mib: int) -> tuple[str, str]:
    """The whole trace, and the same cut inside the huge string."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i,
               "dur": 5, "args": {}} for i in range(2000)]
    head = json.dumps({"traceEvents": events})[:-2]
    huge = ('{"ph": "X", "cat": "cpu_op", "name": "huge", "pid": 1, "tid": 1, "ts": 5, "dur": 1, '
            '"args": {"note": "' + "a" * (mib * 2**20) + '"}}')
    return head + ", " + huge + "]}", head + ", " + huge[:-4]


def timed_load(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        outcome = f"{len(load_file(path, workers=1).events)} events"
    except TraceError as exc:
        outcome = str(exc).replace(str(path), "FILE")
    return time.perf_counter() - start, outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--out", type=Path, default=OUT_DIR / "huge_string.json")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainprof-huge-") as folder:
        path = Path(folder) / "huge.json"
        for mib in args.mb:
            whole, cut = trace_text(mib)
            for kind, text in (("valid", whole), ("unterminated", cut)):
                path.write_text(text)
                seconds, outcome = timed_load(path)
                rows.append({"mib": mib, "kind": kind, "seconds": seconds,
                             "s_per_mib": seconds / mib, "outcome": outcome[:90]})
                print(f"{mib:>5} MiB {kind:<13}{seconds:7.2f} s  {seconds / mib * 1000:6.1f} ms/MiB"
                      f"  {outcome[:70]}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"schema": "trainprof.bench.huge_string/1", "rows": rows},
                                   indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
