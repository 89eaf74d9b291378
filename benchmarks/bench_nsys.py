"""Reading an Nsight Systems export against reading the same events as Kineto JSON: events/s.

    .venv/bin/python benchmarks/bench_nsys.py [EXPORT] [--scale 10] [--repeat 3]

The export (default: the 2xH100 FSDP capture in tests/data/traces/nsys) is first made ``--scale``
times longer: every activity table's rows copied, shifted by whole capture spans, with fresh
correlation ids, so that the reader sees a bigger export of the same shape. trainprof reads it
(trace/nsys/), and its traces are written back as Kineto JSON, one plain ``.json`` per rank
(the same events: kernels, copies, memsets, syncs, CUDA calls, ops and annotations, with their
correlation ids, devices, streams, bytes, launch sizes and shapes). Then, each in a fresh
process and interleaved, trainprof reads the export and reads the JSON files; the figure is
events per second of the read, by the clock and per second of CPU (the process's start and
imports excluded; the whole process's time is in the JSON). On a shared machine the CPU figure
is the steadier one. Figures go to ``benchmarks/out/nsys.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import tempfile
from pathlib import Path

import msgspec

from measure import OUT_DIR, REPO_ROOT, cache_bytecode, machine_info, relative, run_child_script

DEFAULT_EXPORT = REPO_ROOT / "tests" / "data" / "traces" / "nsys" / "h100_2gpu_1s.sqlite"
#: The tables made longer by ``--scale``.
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                   "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                   "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")

CHILD = """
import json, sys, time
from pathlib import Path
mode, path, out = sys.argv[1], Path(sys.argv[3]), Path(sys.argv[4])
from trainprof.trace.load import load_traces
start, cpu = time.perf_counter(), time.process_time()
files = [path] if mode == "nsys" else sorted(path.glob("*.json"))
events = sum(len(t.events) for f in files for t in load_traces(f, workers=1))
out.write_text(json.dumps({"read_s": time.perf_counter() - start, "events": events,
                           "cpu_s": time.process_time() - cpu}))
"""

_CATEGORY = {1: "cpu_op", 2: "user_annotation", 5: "cuda_runtime", 6: "cuda_driver",
             7: "kernel", 8: "gpu_memcpy", 9: "gpu_memset", 10: "cuda_sync",
             11: "user_annotation"}


def scaled_export(src: Path, scale: int, out: Path) -> Path:
    """``src`` with each activity table's rows repeated ``scale`` times, one span apart."""
    shutil.copyfile(src, out)
    with sqlite3.connect(out) as db:
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        lo, hi = db.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        span = hi - lo + 1
        (corr,) = db.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        for table in (t for t in ACTIVITY_TABLES if t in tables):
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            (last,) = db.execute(f"SELECT max(rowid) FROM {table}").fetchone()
            for k in range(1, scale):
                shifted = {"start": f"start + {k * span}", "end": f'"end" + {k * span}',
                           "correlationId": f"correlationId + {k * (corr + 1)}"}
                exprs = ", ".join(shifted.get(c, f'"{c}"') for c in cols)
                db.execute(f"INSERT INTO {table} SELECT {exprs} FROM {table} "
                           f"WHERE rowid <= {last or 0}")
    return out


def kineto_events(trace) -> list[dict]:
    """The trace's events as Kineto writes them (complete events with their args)."""
    ev, out = trace.events, []
    for i in range(len(ev)):
        kind = int(ev.kind[i])
        pid, tid = trace.threads[int(ev.tid[i])]
        args: dict = {}
        if ev.correlation[i] >= 0:
            args["correlation"] = int(ev.correlation[i])
        if ev.device[i] >= 0:
            args.update(device=int(ev.device[i]), stream=int(ev.stream[i]))
        if ev.nbytes[i] == ev.nbytes[i]:
            args["bytes"] = int(ev.nbytes[i])
        if ev.detail[i] >= 0:
            d = ev.details[ev.detail[i]]
            args.update(grid=d["grid"], block=d["block"])
            args["registers per thread"] = d["registers"]
            args["shared memory"] = d["shared_memory"]
        if ev.shape[i] >= 0:
            args["Input Dims"] = json.loads(ev.shapes[ev.shape[i]])
        out.append({"ph": "X", "cat": _CATEGORY.get(kind, "user_annotation"),
                    "name": ev.names[ev.name[i]], "pid": pid, "tid": tid,
                    "ts": round(trace.t0_us + float(ev.ts[i]), 3), "dur": round(float(ev.dur[i]), 3),
                    "args": args})
    return out


def write_kineto(export: Path, folder: Path) -> int:
    """The export's ranks as Kineto JSON files in ``folder``; the number of events."""
    from trainprof.trace.nsys.detect import read_nsys

    total = 0
    for trace in read_nsys(export):
        events = kineto_events(trace)
        total += len(events)
        body = {"schemaVersion": 1, "distributedInfo": {"rank": trace.rank},
                "traceEvents": events}
        (folder / f"rank{trace.rank}.json").write_bytes(msgspec.json.encode(body))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("export", nargs="?", type=Path, default=DEFAULT_EXPORT)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cache_bytecode()
    OUT_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        export = scaled_export(args.export, args.scale, folder / "export.sqlite")
        (folder / "kineto").mkdir()
        events = write_kineto(export, folder / "kineto")
        sizes = {"sqlite_mib": export.stat().st_size / 2**20,
                 "json_mib": sum(p.stat().st_size for p in (folder / "kineto").glob("*")) / 2**20}
        runs: dict[str, list[dict]] = {"nsys": [], "kineto": []}
        for _ in range(args.repeat):
            runs["nsys"].append(run_child_script(CHILD, "nsys", "nsys", 1, export, 600))
            runs["kineto"].append(run_child_script(CHILD, "nsys", "kineto", 1, folder / "kineto",
                                                   600))
    result = {"export": relative(args.export), "scale": args.scale, "events": events, **sizes,
              "machine": machine_info()}
    for name, rows in runs.items():
        read = statistics.median(r["read_s"] for r in rows)
        cpu = statistics.median(r["cpu_s"] for r in rows)
        result[name] = {"events": rows[0]["events"], "read_s": read, "cpu_s": cpu,
                        "events_per_s": rows[0]["events"] / read,
                        "events_per_cpu_s": rows[0]["events"] / cpu,
                        "process_s": statistics.median(r["process_s"] for r in rows),
                        "peak_rss_mib": max(r["peak_rss_mib"] for r in rows)}
        print(f"{name:7} {rows[0]['events']:>9,} events  read {read:6.3f} s "
              f"({cpu:.3f} s CPU)  {rows[0]['events'] / read:>10,.0f} events/s "
              f"({rows[0]['events'] / cpu:,.0f} per CPU s)  "
              f"peak {result[name]['peak_rss_mib']:.0f} MiB")
    ratio = result["nsys"]["events_per_s"] / result["kineto"]["events_per_s"]
    cpu_ratio = result["nsys"]["events_per_cpu_s"] / result["kineto"]["events_per_cpu_s"]
    print(f"export {sizes['sqlite_mib']:.1f} MiB, JSON {sizes['json_mib']:.1f} MiB; "
          f"nsys/Kineto events/s: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU")
    (OUT_DIR / "nsys.json").write_text(json.dumps({**result, "ratio": ratio, "cpu_ratio": cpu_ratio}, indent=2))


if __name__ == "__main__":
    main()
