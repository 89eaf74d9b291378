"""Side-by-side load + analysis benchmark: trainprof against Holistic Trace Analysis and the floor.

    .venv/bin/python benchmarks/bench_analyze.py [--repeat 5] [--hta-repeat 3] [TRACE]

Each tool runs in its own fresh process, several times, interleaved; the figures are medians.
Two kinds of time are reported for each tool:

* in-process: measured inside the worker with ``time.perf_counter`` after its imports are done,
  i.e. *excluding* Python start-up and imports;
* process: the whole child process from spawn to exit as seen by this driver, i.e. *including*
  interpreter start-up, imports, the work, and tear-down.

Peak memory is the child's own ``ru_maxrss`` from ``wait4`` (see ``measure.run_measured``).
The figures go to ``benchmarks/out/analyze.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from measure import (
    OUT_DIR,
    REFERENCE_TRACE,
    REPO_ROOT,
    cache_bytecode,
    machine_info,
    median,
    package_versions,
    relative,
    run_measured,
    self_peak_rss_mib,
)

# Targets from issue 2.
TARGET_HTA_OVER_TRAINPROF = 10.0  # trainprof at least 10x faster than HTA
TARGET_TRAINPROF_OVER_FLOOR = 1.5  # within 1.5x of gunzip + orjson.loads
TARGET_RSS_TRAINPROF_OVER_HTA = 1 / 3  # at most a third of HTA's peak memory

#: A separate interpreter for HTA, used when it exists (see benchmarks/README.md).
HTA_VENV_PYTHON = REPO_ROOT / "benchmarks" / ".venv-hta" / "bin" / "python"


# --------------------------------------------------------------------------------------------
# Workers: each runs in a fresh process and writes its figures as JSON to --result.
# They import only the standard library at module level, so that any interpreter can run them.
# --------------------------------------------------------------------------------------------


def work_floor(trace: Path, gc_off: bool = False) -> dict:
    """The floor: read, gunzip and ``orjson.loads`` the file, nothing else."""
    t0 = time.perf_counter()
    import gc
    import gzip

    import orjson

    if gc_off:  # the cyclic GC scans the growing heap of new dicts: a third of the time at 53 MB
        gc.disable()
    t1 = time.perf_counter()
    raw = trace.read_bytes()
    data = gzip.decompress(raw) if trace.name.endswith(".gz") else raw
    t2 = time.perf_counter()
    doc = orjson.loads(data)
    t3 = time.perf_counter()
    return {
        "import_s": t1 - t0,
        "work_s": t3 - t1,
        "read_gunzip_s": t2 - t1,
        "json_decode_s": t3 - t2,
        "json_bytes": len(data),
        "events": len(doc["traceEvents"]),
    }


def work_trainprof(trace: Path) -> dict:
    """``trainprof.analyze(path)``, timed alone, then ``.to_dict()``."""
    t0 = time.perf_counter()
    import trainprof

    try:
        analyze = trainprof.analyze
    except (AttributeError, ImportError) as exc:
        return {"available": False, "missing": True, "reason": f"trainprof.analyze: {exc}"}
    t1 = time.perf_counter()
    analysis = analyze(trace)
    t2 = time.perf_counter()
    result = analysis.to_dict()
    t3 = time.perf_counter()
    return {
        "import_s": t1 - t0,
        "work_s": t2 - t1,
        "to_dict_s": t3 - t2,
        "schema": result.get("schema"),
        "ranks": len(result.get("ranks", [])),
    }


def work_trainprof_load(trace: Path) -> dict:
    """``trainprof.load(path)`` alone: the loader without the analysis (an interim figure)."""
    t0 = time.perf_counter()
    import trainprof

    try:
        load = trainprof.load
    except (AttributeError, ImportError) as exc:
        return {"available": False, "missing": True, "reason": f"trainprof.load: {exc}"}
    t1 = time.perf_counter()
    traces = load(trace)
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "work_s": t2 - t1, "traces": len(traces)}


def work_hta(trace: Path) -> dict:
    """HTA: ``TraceAnalysis`` load, then temporal, kernel, comm/comp overlap and idle breakdowns."""
    # HTA takes a folder and treats every *.json / *.gz file directly in it as one rank's trace
    # (rank read from the text "rank": N, else 0), so the trace gets a folder of its own.
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as folder:
        os.symlink(trace.resolve(), Path(folder) / trace.name)
        t0 = time.perf_counter()
        from hta.trace_analysis import TraceAnalysis

        t1 = time.perf_counter()
        analyzer = TraceAnalysis(trace_dir=folder)
        t2 = time.perf_counter()
        ranks = sorted(analyzer.t.traces)
        steps = {}
        results = {}

        def timed(name, call):
            start = time.perf_counter()
            value = call()
            steps[f"{name}_s"] = time.perf_counter() - start
            return value

        temporal = timed("temporal", lambda: analyzer.get_temporal_breakdown(visualize=False))
        kernel_types, _ = timed(
            "kernel", lambda: analyzer.get_gpu_kernel_breakdown(visualize=False)
        )
        overlap = timed("overlap", lambda: analyzer.get_comm_comp_overlap(visualize=False))
        idle, _ = timed(
            "idle", lambda: analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
        )
        t3 = time.perf_counter()
    for name, frame in [
        ("temporal", temporal),
        ("kernel_types", kernel_types),
        ("overlap", overlap),
        ("idle", idle),
    ]:
        results[name] = json.loads(frame.to_json(orient="records"))
    return {
        "import_s": t1 - t0,
        "work_s": t3 - t1,
        "load_s": t2 - t1,
        "analyses_s": t3 - t2,
        **steps,
        "ranks": ranks,
        "rows_kept": {str(r): len(analyzer.t.traces[r]) for r in ranks},
        "results": results,
    }


WORKERS = {
    "floor": work_floor,
    "floor-gc-off": lambda trace: work_floor(trace, gc_off=True),
    "trainprof": work_trainprof,
    "trainprof-load": work_trainprof_load,
    "hta": work_hta,
}


def run_worker(name: str, trace: Path, result_file: Path) -> int:
    """Entry point inside the child process."""
    try:
        figures = WORKERS[name](trace)
        figures.setdefault("available", True)
        figures["peak_rss_in_process_mib"] = self_peak_rss_mib()
        status = 0
    except Exception as exc:  # reported, not raised: one failing tool must not stop the others
        figures = {
            "available": False,
            "reason": f"{type(exc).__name__}: {exc}".strip()[:500],
            "traceback": traceback.format_exc()[-2000:],
        }
        status = 1
    result_file.write_text(json.dumps(figures))
    return status


# --------------------------------------------------------------------------------------------
# Driver: spawns the workers, collects medians, prints the table, writes analyze.json.
# It stays small (standard library only) because a child's ru_maxrss starts at the
# high-water mark of the process that spawned it.
# --------------------------------------------------------------------------------------------


def spawn_worker(python: str, name: str, trace: Path, timeout_s: float) -> dict:
    """One fresh process running worker ``name``; its own figures plus process wall and peak RSS."""
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        result_file = Path(folder) / "result.json"
        cmd = [
            python,
            str(Path(__file__).resolve()),
            "--worker",
            name,
            "--result",
            str(result_file),
            str(trace),
        ]
        done = run_measured(cmd, cwd=REPO_ROOT, timeout_s=timeout_s)
        if result_file.exists():
            figures = json.loads(result_file.read_text())
        else:
            last = done.stderr_tail.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            figures = {"available": False, "reason": last[0]}
    for key in ("reason", "traceback"):
        if key in figures:
            figures[key] = sanitise(figures[key])
    figures.update(process_s=done.wall_s, peak_rss_mib=done.max_rss_mib, returncode=done.returncode)
    return figures


def spawn_cli(trace: Path, timeout_s: float) -> dict:
    """``trainprof analyze TRACE --format json -o out.json``: whole-command wall time and peak RSS."""
    exe = Path(sys.executable).with_name("trainprof")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "trainprof"]
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as folder:
        out = Path(folder) / "out.json"
        done = run_measured(
            [*command, "analyze", str(trace), "--format", "json", "-o", str(out)],
            cwd=REPO_ROOT,
            timeout_s=timeout_s,
        )
        figures = {
            "process_s": done.wall_s,
            "peak_rss_mib": done.max_rss_mib,
            "returncode": done.returncode,
        }
        if done.returncode == 0 and out.exists():
            try:
                figures["schema"] = json.loads(out.read_text()).get("schema")
                figures["available"] = True
            except ValueError as exc:
                figures.update(available=False, reason=f"output is not JSON: {exc}")
        else:
            last = done.stderr_tail.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            missing = any(s in done.stderr_tail for s in MISSING_CLI)
            figures.update(available=False, missing=missing, reason=sanitise(last[0][:500]))
    return figures


#: stderr of a `trainprof` command that does not exist yet (as opposed to one that failed).
MISSING_CLI = ("No module named", "invalid choice", "ImportError", "cannot import name")


def sanitise(text: str) -> str:
    """Error text with this machine's paths written relative to the repository root."""
    return text.replace(f"{REPO_ROOT.parent}{os.sep}", f"..{os.sep}").replace(
        f"{REPO_ROOT}{os.sep}", ""
    )


def summarise(runs: list[dict]) -> dict:
    """Median of every numeric figure over the runs that worked; the rest taken from the first."""
    ok = [r for r in runs if r.get("available")]
    if not ok:
        return {
            "available": False,
            "reason": runs[0].get("reason", "unknown") if runs else "not run",
        }
    summary = {"available": True, "runs": len(ok)}
    for key, value in ok[0].items():
        if isinstance(value, bool) or key in ("available", "returncode"):
            continue
        if isinstance(value, int | float):
            summary[key] = median([r[key] for r in ok if isinstance(r.get(key), int | float)])
        else:
            summary[key] = value
    summary["process_s_all"] = [round(r["process_s"], 3) for r in ok]
    for key in ("work_s", "process_s"):  # the least disturbed run, for a noisy machine
        if isinstance(ok[0].get(key), int | float):
            summary[f"{key}_min"] = min(r[key] for r in ok)
    if len(ok) < len(runs):
        summary["failed_runs"] = len(runs) - len(ok)
        summary["failure"] = next(r.get("reason") for r in runs if not r.get("available"))
    return summary


def ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def ratios(tools: dict) -> dict:
    """The three target ratios, each excluding and including start-up where that applies."""
    floor, hta = tools["floor"], tools["hta"]
    api, cli = tools["trainprof"], tools["trainprof-cli"]

    def get(tool: dict, key: str) -> float | None:
        return tool.get(key) if tool.get("available") else None

    speedup = {
        "excluding_startup": ratio(get(hta, "work_s"), get(api, "work_s")),
        "including_startup": ratio(get(hta, "process_s"), get(cli, "process_s")),
    }
    vs_floor = {
        "excluding_startup": ratio(get(api, "work_s"), get(floor, "work_s")),
        "including_startup": ratio(get(cli, "process_s"), get(floor, "process_s")),
    }
    memory = {
        "cli": ratio(get(cli, "peak_rss_mib"), get(hta, "peak_rss_mib")),
        "api": ratio(get(api, "peak_rss_mib"), get(hta, "peak_rss_mib")),
    }

    def verdict(values: dict, ok) -> dict:
        return {k: (None if v is None else bool(ok(v))) for k, v in values.items()}

    return {
        "hta_over_trainprof_time": {
            **speedup,
            "target": f">= {TARGET_HTA_OVER_TRAINPROF:g}",
            "met": verdict(speedup, lambda v: v >= TARGET_HTA_OVER_TRAINPROF),
        },
        "trainprof_over_floor_time": {
            **vs_floor,
            "target": f"<= {TARGET_TRAINPROF_OVER_FLOOR:g}",
            "met": verdict(vs_floor, lambda v: v <= TARGET_TRAINPROF_OVER_FLOOR),
        },
        "trainprof_over_hta_peak_rss": {
            **memory,
            "target": "<= 1/3",
            "met": verdict(memory, lambda v: v <= TARGET_RSS_TRAINPROF_OVER_HTA),
        },
    }


def fmt(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def print_report(report: dict) -> None:
    tools = report["tools"]
    print(
        f"\ntrace: {report['trace']}  ({report.get('json_mb', '?')} MB of JSON, "
        f"{report.get('events', '?')} events)"
    )
    print(
        f"machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, "
        f"{report['machine']['memory_gib']} GiB, Python {report['machine']['python']}\n"
    )
    header = f"{'tool':<24}{'runs':>5}{'in-process s':>14}{'process s':>11}{'imports s':>11}{'peak RSS MiB':>14}"
    print(header)
    print(f"{'':<29}{'(excl. start-up)':>16}{'(incl.)':>9}")
    print("-" * len(header))
    labels = {
        "floor": "floor (gunzip+orjson)",
        "floor-gc-off": "floor, GC off",
        "trainprof": "trainprof.analyze()",
        "trainprof-cli": "trainprof analyze (CLI)",
        "trainprof-load": "trainprof.load() only",
        "hta": "HTA load + 4 analyses",
    }
    for key, label in labels.items():
        tool = tools.get(key)
        if tool is None:
            continue
        if not tool.get("available"):
            print(f"{label:<24}{'':>5}  not available: {tool.get('reason', '')[:70]}")
            continue
        print(
            f"{label:<24}{tool['runs']:>5}{fmt(tool.get('work_s')):>14}{fmt(tool.get('process_s')):>11}"
            f"{fmt(tool.get('import_s')):>11}{fmt(tool.get('peak_rss_mib'), '.0f'):>14}"
        )
    hta = tools.get("hta", {})
    if hta.get("available"):
        print(
            f"\nHTA split: load {hta['load_s']:.2f} s; temporal {hta['temporal_s']:.2f}, kernel "
            f"{hta['kernel_s']:.2f}, overlap {hta['overlap_s']:.2f}, idle {hta['idle_s']:.2f} s"
        )
    floor = tools.get("floor", {})
    if floor.get("available"):
        print(
            f"floor split: read+gunzip {floor['read_gunzip_s']:.2f} s, orjson.loads {floor['json_decode_s']:.2f} s"
        )
    print()
    r = report["ratios"]
    print(f"{'ratio':<34}{'excl. start-up':>15}{'incl. start-up':>16}{'target':>9}")
    for key, label in [
        ("hta_over_trainprof_time", "HTA time / trainprof time"),
        ("trainprof_over_floor_time", "trainprof time / floor time"),
    ]:
        row = r[key]
        print(
            f"{label:<34}{fmt(row['excluding_startup'], '.1f', 'x'):>15}"
            f"{fmt(row['including_startup'], '.1f', 'x'):>16}{row['target']:>9}"
        )
    row = r["trainprof_over_hta_peak_rss"]
    print(
        f"{'trainprof peak RSS / HTA peak RSS':<34}{fmt(row['api'], '.2f'):>15}{fmt(row['cli'], '.2f'):>16}"
        f"{row['target']:>9}   (API worker | CLI)"
    )
    print(f"\nwritten: {relative(report['_out'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", type=Path, default=REFERENCE_TRACE)
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs of floor and trainprof (default 5)"
    )
    parser.add_argument("--hta-repeat", type=int, default=3, help="runs of HTA (default 3)")
    parser.add_argument(
        "--hta-python",
        help="interpreter with HTA installed (default: "
        "benchmarks/.venv-hta/bin/python if present, else this one)",
    )
    parser.add_argument("--no-hta", action="store_true", help="skip HTA")
    parser.add_argument("--timeout", type=float, default=600, help="per-run limit in seconds")
    parser.add_argument("--out", type=Path, default=OUT_DIR / "analyze.json")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        return run_worker(args.worker, args.trace, args.result)
    if not args.trace.exists():
        parser.error(f"no such trace: {args.trace}")

    hta_python = args.hta_python or (
        str(HTA_VENV_PYTHON) if HTA_VENV_PYTHON.exists() else sys.executable
    )
    args.trace.read_bytes()  # into the page cache, so that no tool pays for the first disk read
    cache_bytecode(hta_python)  # both tools start from cached bytecode (measure.py)
    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        print(
            f"warning: load average {load_before[0]:.2f} before the run: other work on this "
            "machine will slow every tool and add noise",
            file=sys.stderr,
        )

    plan = [
        ("floor", args.repeat),
        ("floor-gc-off", args.repeat),
        ("trainprof", args.repeat),
        ("trainprof-cli", args.repeat),
        ("trainprof-load", args.repeat),
        ("hta", 0 if args.no_hta else args.hta_repeat),
    ]
    runs: dict[str, list[dict]] = {name: [] for name, _ in plan}
    rounds = max(n for _, n in plan)
    for i in range(rounds):  # interleaved, so that drift in the machine's speed hits every tool
        for name, count in plan:
            if i >= count or _skip(name, runs):
                continue
            print(f"round {i + 1}/{rounds}: {name} ...", end=" ", flush=True)
            if name == "trainprof-cli":
                figures = spawn_cli(args.trace, args.timeout)
            else:
                python = hta_python if name == "hta" else sys.executable
                figures = spawn_worker(python, name, args.trace, args.timeout)
            runs[name].append(figures)
            print(
                f"{figures['process_s']:.2f} s"
                if figures.get("available")
                else f"not available: {figures.get('reason', '')[:100]}"
            )

    tools = {name: summarise(r) for name, r in runs.items()}
    if args.no_hta:
        tools["hta"] = {"available": False, "reason": "skipped (--no-hta)"}
    report = {
        "schema": "trainprof.bench.analyze/1",
        "trace": relative(args.trace.resolve()),
        "json_mb": round(tools["floor"].get("json_bytes", 0) / 1e6, 1) or None,
        "events": tools["floor"].get("events"),
        "machine": machine_info(),
        "versions": {
            **package_versions(["trainprof", "orjson", "numpy", "msgspec"]),
            "hta_interpreter": "benchmarks/.venv-hta"
            if hta_python == str(HTA_VENV_PYTHON)
            else "same as driver",
            **{
                f"hta:{k}": v
                for k, v in package_versions(
                    ["HolisticTraceAnalysis", "traceinsight", "pandas", "numpy"], hta_python
                ).items()
            },
        },
        "units": {"time": "seconds, median over runs", "memory": "MiB (2^20 bytes), peak RSS"},
        "timing_definitions": {
            "work_s": "in-process, after imports: excludes Python start-up and imports",
            "process_s": "whole child process, spawn to exit: includes start-up, imports and tear-down",
            "import_s": "in-process time of the tool's imports",
        },
        "driver_peak_rss_mib": self_peak_rss_mib(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "tools": tools,
        "runs": runs,
    }
    report["ratios"] = ratios(tools)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    report["_out"] = args.out.resolve()
    print_report(report)
    return 0


def _skip(name: str, runs: dict[str, list[dict]]) -> bool:
    """A tool that does not exist yet is tried once; one that failed is tried every round."""
    return any(r.get("missing") for r in runs[name])


if __name__ == "__main__":
    sys.exit(main())
