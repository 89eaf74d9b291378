"""Analyse a 1 GiB trace: ``trainprof analyze`` must take under 30 s and under 2.5 GB.

    .venv/bin/python benchmarks/bench_big.py [--suffix .json.gz|.json] [--keep] [--floor]

Generates the trace with ``make_big_trace.py`` from the issue's reference trace (into a
temporary folder, deleted afterwards unless ``--keep``), then runs, each in a fresh process:
the ``trainprof analyze BIG --format json -o result.json`` command (wall time including start-up,
and peak RSS), and the ``trainprof.analyze()`` call alone (in-process time, excluding start-up).
``--floor`` adds gunzip + ``orjson.loads`` of the same file for scale, with Python's cyclic
garbage collector on (the default) and off (about 9 GB of RAM each).
The figures go to ``benchmarks/out/big.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench_analyze import spawn_cli, spawn_worker, summarise
from make_big_trace import DEFAULT_TARGET_BYTES
from measure import (
    MIB,
    OUT_DIR,
    REFERENCE_TRACE,
    cache_bytecode,
    machine_info,
    package_versions,
    relative,
    run_measured,
    self_peak_rss_mib,
)

TARGET_SECONDS = 30.0
#: "Under 2.5 GB", read strictly: 2.5e9 bytes (2384 MiB).
TARGET_RSS_MIB = 2.5e9 / MIB


def generate(src: Path, out: Path, target_bytes: int, indent: bool) -> dict:
    """Run the generator in its own process: the driver must stay small (see measure.py)."""
    script = Path(__file__).with_name("make_big_trace.py")
    figures_file = out.with_name("figures.json")
    cmd = [
        sys.executable,
        "-c",
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from make_big_trace import make_big_trace;"
        "f = make_big_trace(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]),"
        " indent=sys.argv[6] == 'indent', quiet=True);"
        "Path(sys.argv[5]).write_text(json.dumps(f))",
        str(script.parent),
        str(src),
        str(out),
        str(target_bytes),
        str(figures_file),
        "indent" if indent else "compact",
    ]
    done = run_measured(cmd)
    if done.returncode != 0:
        raise SystemExit(f"make_big_trace failed: {done.stderr_tail.strip()[-500:]}")
    figures = json.loads(figures_file.read_text())
    figures_file.unlink()
    figures.update(wall_s=done.wall_s, peak_rss_mib=done.max_rss_mib)
    figures["source"] = relative(Path(figures["source"]).resolve())
    figures.pop("out", None)
    return figures


def verdict(tool: dict) -> dict:
    """Targets for one tool's median figures (None when it did not run)."""
    if not tool.get("available"):
        return {"time": None, "rss": None}
    seconds = tool.get("process_s")
    return {"time": seconds < TARGET_SECONDS, "rss": tool["peak_rss_mib"] < TARGET_RSS_MIB}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=REFERENCE_TRACE, help="trace to scale up")
    parser.add_argument("--target-bytes", type=int, default=DEFAULT_TARGET_BYTES)
    parser.add_argument("--suffix", choices=[".json.gz", ".json"], default=".json.gz")
    parser.add_argument(
        "--indent",
        action="store_true",
        help="write the trace one field per line (fewer events per GB; see make_big_trace.py)",
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--floor", action="store_true", help="also gunzip + orjson.loads it")
    parser.add_argument("--dir", type=Path, help="where to write the trace (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated trace")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=OUT_DIR / "big.json")
    args = parser.parse_args(argv)
    cache_bytecode()  # start-up as an installed package's (measure.py)

    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(
            f"warning: load average {load_before[0]:.2f} before the run: other work on this "
            "machine will slow it down",
            file=sys.stderr,
        )
    folder = Path(tempfile.mkdtemp(prefix="trainprof-big-", dir=args.dir))
    trace = folder / f"big_trace{args.suffix}"
    try:
        print(
            f"generating {args.target_bytes / 2**30:.2f} GiB of JSON from {relative(args.src.resolve())} ...",
            flush=True,
        )
        generated = generate(args.src, trace, args.target_bytes, args.indent)
        print(
            f"  {generated['json_bytes'] / 1e6:,.0f} MB of JSON, {generated['file_bytes'] / 1e6:,.0f} MB "
            f"file ({generated['layout']}), {generated['events']:,} events, {generated['steps']} steps, "
            f"{generated['wall_s']:.1f} s",
            flush=True,
        )
        names = ["trainprof-cli", "trainprof", "floor", "floor-gc-off"]
        runs: dict[str, list[dict]] = {name: [] for name in names}
        for i in range(args.repeat):
            for name in runs:
                if name.startswith("floor") and not args.floor:
                    continue
                print(f"round {i + 1}/{args.repeat}: {name} ...", end=" ", flush=True)
                if name == "trainprof-cli":
                    figures = spawn_cli(trace, args.timeout)
                else:
                    figures = spawn_worker(sys.executable, name, trace, args.timeout)
                runs[name].append(figures)
                print(
                    f"{figures['process_s']:.1f} s, {figures['peak_rss_mib']:,.0f} MiB"
                    if figures.get("available")
                    else f"not available: {figures.get('reason', '')[:80]}"
                )
    finally:
        if args.keep:
            print(f"kept: {trace}")
        else:
            shutil.rmtree(folder, ignore_errors=True)

    tools = {name: summarise(r) for name, r in runs.items() if r}
    cli = tools["trainprof-cli"]
    report = {
        "schema": "trainprof.bench.big/1",
        "machine": machine_info(),
        "versions": package_versions(["trainprof", "orjson", "numpy", "msgspec"]),
        "generated": generated,
        "targets": {
            "process_s": f"< {TARGET_SECONDS:g}",
            "peak_rss_mib": f"< {TARGET_RSS_MIB:.0f} (2.5e9 bytes)",
        },
        "met": verdict(cli),
        "units": {"time": "seconds, median over runs", "memory": "MiB (2^20 bytes), peak RSS"},
        "driver_peak_rss_mib": self_peak_rss_mib(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "tools": tools,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))

    print(f"\n{'tool':<26}{'in-process s':>14}{'process s':>11}{'peak RSS MiB':>14}")
    print(f"{'':<26}{'(excl. start-up)':>16}{'(incl.)':>9}")
    for name, label in [
        ("trainprof-cli", "trainprof analyze (CLI)"),
        ("trainprof", "trainprof.analyze()"),
        ("floor", "floor (gunzip+orjson)"),
        ("floor-gc-off", "floor, GC off"),
    ]:
        tool = tools.get(name)
        if tool is None:
            continue
        if not tool.get("available"):
            print(f"{label:<26}  not available: {tool.get('reason', '')[:70]}")
            continue
        work = tool.get("work_s")
        print(
            f"{label:<26}{'-' if work is None else f'{work:.1f}':>14}{tool['process_s']:>11.1f}"
            f"{tool['peak_rss_mib']:>14,.0f}"
        )
    met = report["met"]
    if met["time"] is None:
        print("\ntargets: not measured (trainprof analyze not available)")
    else:
        print(
            f"\ntargets: time < {TARGET_SECONDS:g} s {'met' if met['time'] else 'NOT met'}; "
            f"peak RSS < {TARGET_RSS_MIB:,.0f} MiB {'met' if met['rss'] else 'NOT met'}"
        )
    print(f"written: {relative(args.out.resolve())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
