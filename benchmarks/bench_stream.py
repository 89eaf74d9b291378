"""Traces larger than memory: time and peak memory of ``trainprof analyze --max-memory``.

    .venv/bin/python benchmarks/bench_stream.py [--target-bytes 10000000000] [--max-memory 4G]
        [--small-bytes 1073741824] [--skip-small] [--skip-big] [--keep] [--work DIR]

Makes a trace of ``--target-bytes`` of JSON with make_big_trace.py from the reference trace
(gzipped; free disk is checked first: the gzip and the spill must fit), analyses it in a child
process with ``trainprof analyze BIG --max-memory 4G --format json -o out.json`` and reports
wall time and peak RSS (``os.wait4``'s ``ru_maxrss``). The same on the 1 GiB trace, read whole
(a budget far above its need) and streamed (``--max-memory 1G``). The traces are deleted at the
end unless ``--keep``. Figures go to benchmarks/out/bench_stream.json; docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench_big import generate
from measure import OUT_DIR, REFERENCE_TRACE, REPO_ROOT, machine_info, run_measured

#: Disk needed per byte of JSON: the gzipped trace (level 1, about 0.09) and the spill (0.8).
DISK_PER_JSON_BYTE = 0.9


def analyse(trace: Path, max_memory: str, out: Path) -> dict:
    """Run the analysis in a child process; its figures and whether it streamed."""
    src = str(REPO_ROOT / "src")  # this checkout's trainprof, in the child too
    if src not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "trainprof", "analyze", str(trace), "--max-memory", max_memory,
           "--format", "json", "-o", str(out), "--no-progress"]
    done = run_measured(cmd)
    row = {"max_memory": max_memory, "returncode": done.returncode,
           "wall_s": round(done.wall_s, 1), "peak_rss_mib": round(done.max_rss_mib)}
    if done.returncode != 0:
        row["stderr"] = done.stderr_tail.strip()[-800:]
        return row
    rank = json.loads(out.read_text())["ranks"][0]
    row["streamed"] = any(n.startswith("Streamed") for n in rank["notes"])
    row["steps"] = rank["steps"]["count"]
    row["mean_step_ms"] = rank["steps"]["mean_ms"]
    out.unlink()
    return row


def check_disk(folder: Path, json_bytes: int) -> None:
    need = int(json_bytes * DISK_PER_JSON_BYTE)
    free = shutil.disk_usage(folder).free
    if need > free:
        raise SystemExit(f"need about {need / 2**30:.1f} GiB free in {folder}, "
                         f"{free / 2**30:.1f} GiB are")


def case(work: Path, name: str, target: int, runs: list[str], keep: bool) -> dict:
    check_disk(work, target)
    trace = work / f"{name}.json.gz"
    made = generate(REFERENCE_TRACE, trace, target, indent=False)
    print(f"{name}: made {made}", file=sys.stderr)
    try:
        rows = []
        for max_memory in runs:
            rows.append(analyse(trace, max_memory, work / f"{name}.out.json"))
            print(f"{name}: {rows[-1]}", file=sys.stderr)
    finally:
        if not keep:
            trace.unlink(missing_ok=True)
    return {"trace": made, "runs": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-bytes", type=int, default=10_000_000_000)
    parser.add_argument("--small-bytes", type=int, default=2**30)
    parser.add_argument("--max-memory", default="4G")
    parser.add_argument("--skip-small", action="store_true")
    parser.add_argument("--skip-big", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the generated traces")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the traces (default: a new temporary folder)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-stream-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": machine_info()}
    if not args.skip_small:
        result["small"] = case(work, "small", args.small_bytes, ["64G", "1G"], args.keep)
    if not args.skip_big:
        result["big"] = case(work, "big", args.target_bytes, [args.max_memory], args.keep)
    if not args.keep and args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "bench_stream.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
