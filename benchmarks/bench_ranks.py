"""Many ranks against one: `trainprof analyze` on 32 copies of a real trace, and on one copy.

Targets (issue 8): analysing 32 ranks takes at most 20x the wall time of one rank on a 2-core
machine, and at most 3x its peak memory. The copies are the A100 DDP trace of
``tests/data/traces`` (HTA's ``nccl_parser_config``), each with its own ``distributedInfo.rank``,
written to a temporary folder (never the repository). Each run is a fresh process; the peak
memory is that of the whole process tree (the command and its analysis workers), sampled
every 10 ms with psutil: the sum of the resident sets (RSS, which counts shared library pages
once per process) and of the proportional sets (PSS, which splits them). Results go to
``benchmarks/out/ranks.json``; docs/performance.md has the figures.

    .venv/bin/python benchmarks/bench_ranks.py [--ranks 32] [--repeat 3] [--trace PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import MIB, OUT_DIR, REPO_ROOT, machine_info, median, relative  # noqa: E402

DEFAULT_TRACE = (REPO_ROOT / "tests" / "data" / "traces" / "hta" / "tests" / "data"
                 / "nccl_parser_config" / "nccl_data.json.gz")
TIME_TARGET = 20.0
MEMORY_TARGET = 3.0
SAMPLE_S = 0.01
#: The API row: imports first (not timed), then the analysis alone.
API_TIMER = ("import sys, time\n"
             "from trainprof.pipeline import analyze\n"
             "t = time.perf_counter(); analyze(sys.argv[1])\n"
             "print(time.perf_counter() - t)\n")


def make_copies(trace: Path, folder: Path, ranks: int) -> int:
    """``rank{R}.json.gz`` for R in range(ranks), each naming its rank; returns JSON bytes."""
    doc = msgspec.json.decode(gzip.decompress(trace.read_bytes()))
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    size = 0
    for rank in range(ranks):
        doc["distributedInfo"] = {**info, "rank": rank, "world_size": ranks}
        data = msgspec.json.encode(doc)
        size = len(data)
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(data, 1))
    return size


def run_tree(cmd: list[str]) -> dict:
    """Wall time, stdout and the peak RSS and PSS summed over the process and its children."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    top = psutil.Process(proc.pid)
    peak_rss = peak_pss = 0
    while proc.poll() is None:
        rss = pss = 0
        try:
            for p in [top, *top.children(recursive=True)]:
                try:
                    full = p.memory_full_info()
                    rss, pss = rss + full.rss, pss + getattr(full, "pss", full.rss)
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
        except psutil.Error:
            pass
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(SAMPLE_S)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return {"wall_s": time.perf_counter() - start, "rss_mib": peak_rss / MIB,
            "pss_mib": peak_pss / MIB, "stdout": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "trainprof", "analyze"]
    with tempfile.TemporaryDirectory(prefix="trainprof-ranks-") as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        one.mkdir()
        many.mkdir()
        json_size = make_copies(args.trace, many, args.ranks)
        os.link(many / "rank0.json.gz", one / "rank0.json.gz")
        out = Path(tmp) / "out.json"
        rows = {
            "one rank (CLI)": cli + [str(one), "--format", "json", "-o", str(out)],
            f"{args.ranks} ranks (CLI)": cli + [str(many), "--format", "json", "-o", str(out)],
            f"{args.ranks} ranks (CLI, --jobs 1)": cli + [str(many), "--jobs", "1",
                                                           "--format", "json", "-o", str(out)],
            "one rank (API)": [sys.executable, "-c", API_TIMER, str(one)],
            f"{args.ranks} ranks (API)": [sys.executable, "-c", API_TIMER, str(many)],
        }
        load_before = os.getloadavg()[0]
        runs: dict[str, list[dict]] = {name: [] for name in rows}
        for _ in range(args.repeat):  # interleaved, so a busy moment hits every row
            for name, cmd in rows.items():
                runs[name].append(run_tree(cmd))
        load_after = os.getloadavg()[0]
    report = summarise(runs, args, json_size, (load_before, load_after))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "ranks.json").write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)


def summarise(runs: dict[str, list[dict]], args: argparse.Namespace, json_size: int,
              load: tuple[float, float]) -> dict:
    rows = {}
    for name, done in runs.items():
        rows[name] = {
            "wall_s": median([r["wall_s"] for r in done]),
            "in_process_s": median([float(r["stdout"]) for r in done])
            if "(API)" in name else None,
            "rss_mib": median([r["rss_mib"] for r in done]),
            "pss_mib": median([r["pss_mib"] for r in done]),
        }
    one, many = rows["one rank (CLI)"], rows[f"{args.ranks} ranks (CLI)"]
    api_one, api_many = rows["one rank (API)"], rows[f"{args.ranks} ranks (API)"]
    ratios = {
        "time, CLI (incl. start-up)": many["wall_s"] / one["wall_s"],
        "time, API (excl. start-up)": api_many["in_process_s"] / api_one["in_process_s"],
        "peak memory, RSS sum": many["rss_mib"] / one["rss_mib"],
        "peak memory, PSS sum": many["pss_mib"] / one["pss_mib"],
    }
    return {"trace": relative(args.trace), "ranks": args.ranks, "repeat": args.repeat,
            "json_mb_per_rank": json_size / 1e6, "machine": machine_info(),
            "load_average": {"before": load[0], "after": load[1]}, "rows": rows,
            "ratios": ratios, "targets": {"time": TIME_TARGET, "memory": MEMORY_TARGET}}


def print_report(report: dict) -> None:
    print(f"{report['ranks']} copies of {report['trace']} "
          f"({report['json_mb_per_rank']:.1f} MB of JSON each), medians of {report['repeat']}; "
          f"load average {report['load_average']['before']:.2f} -> "
          f"{report['load_average']['after']:.2f}")
    print(f"{'row':<30} {'wall s':>8} {'in-process s':>13} {'RSS MiB':>9} {'PSS MiB':>9}")
    for name, r in report["rows"].items():
        inner = "-" if r["in_process_s"] is None else f"{r['in_process_s']:.2f}"
        print(f"{name:<30} {r['wall_s']:>8.2f} {inner:>13} {r['rss_mib']:>9.0f} "
              f"{r['pss_mib']:>9.0f}")
    for name, ratio in report["ratios"].items():
        target = report["targets"]["time" if name.startswith("time") else "memory"]
        print(f"{name:<30} {ratio:>6.1f}x  (target <= {target:g}x: "
              f"{'met' if ratio <= target else 'NOT met'})")


if __name__ == "__main__":
    main()
