"""CPU seconds of building the columns after the compiled scanner, against another checkout.

    .venv/bin/python benchmarks/bench_columns.py [TRACE] [--repeat 9] [--against SRC]

"Columns" is everything ``load_file`` does after ``_scan.scan`` returns: each scanned piece's
``ColumnBuilder.add`` (its values decoded, numpy), ``finish`` (concatenation, sort by time), the
``Trace`` and its launch context. Each piece (as the loader cuts it) is scanned just before it
is added, as the loader does (so that it is in the cache), and only the adding is timed
(``time.thread_time``).
``load_file`` itself is timed too: this process's CPU (the gunzip thread included), the main
thread's CPU, and the wall time. ``--against SRC`` (a checkout's ``src`` folder) imports that
code as a second package and runs it interleaved with this one, round by round; the minimum of
the rounds is shown. Figures go to ``benchmarks/out/columns.json``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_sections import import_copy
from measure import OUT_DIR, REFERENCE_TRACE, machine_info


def pieces_of(package: str, path: Path) -> list[Any]:
    """The pieces of the event array as the loader reads them: the JSON text of each scanned
    one (scanned again in each round), the events of the others."""
    stream = importlib.import_module(f"{package}.trace.stream")
    scan = importlib.import_module(f"{package}.trace.scan")
    return [chunk.text() if isinstance(chunk, scan.ScannedPiece) else chunk
            for chunk in stream.EventReader(path).chunks()]


def column_timer(package: str, path: Path) -> Callable[[], float]:
    """A function giving the CPU seconds of one round of column building."""
    scan = importlib.import_module(f"{package}.trace.scan")
    columns = importlib.import_module(f"{package}.trace.columns")
    model = importlib.import_module(f"{package}.trace.model")
    context = importlib.import_module(f"{package}.trace.kernel_context")
    pieces = pieces_of(package, path)

    def one_round() -> float:
        gc.collect()
        gc.disable()
        try:
            builder, took = columns.ColumnBuilder(path), 0.0
            for raw in pieces:
                piece = scan.scan_piece(raw) if isinstance(raw, bytes) else raw
                start = time.thread_time()
                builder.add(piece)
                took += time.thread_time() - start
            start = time.thread_time()
            events, memory, flows, threads, t0 = builder.finish()
            trace = model.Trace(path=path, rank=0, window=0, t0_us=t0, events=events,
                                memory=memory, flows=flows, threads=threads, metadata={},
                                notes=[])
            context.apply_launch_context(trace)
            return took + time.thread_time() - start
        finally:
            gc.enable()

    return one_round


def load_timer(package: str, path: Path) -> Callable[[], dict[str, float]]:
    """A function giving the CPU (process, main thread) and wall seconds of one load."""
    load_file = importlib.import_module(f"{package}.trace.load").load_file

    def one_load() -> dict[str, float]:
        gc.collect()
        cpu, main, wall = time.process_time(), time.thread_time(), time.perf_counter()
        trace = load_file(path, workers=1)
        out = {"load_cpu_s": time.process_time() - cpu, "load_main_s": time.thread_time() - main,
               "load_wall_s": time.perf_counter() - wall}
        del trace
        return out

    return one_load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=REFERENCE_TRACE)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--against", type=Path, help="another checkout's src folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        packages = {"this": "trainprof"}
        if args.against:
            packages = {"base": import_copy(args.against, Path(tmp)), **packages}
        timers = {k: (column_timer(p, args.trace), load_timer(p, args.trace))
                  for k, p in packages.items()}
        best: dict[str, dict[str, float]] = {k: {} for k in packages}
        for round_ in range(args.repeat):
            labels = list(packages) if round_ % 2 == 0 else list(packages)[::-1]
            for label in labels:
                columns, load = timers[label]
                figures = {"columns_s": columns(), **load()}
                for key, value in figures.items():
                    best[label][key] = min(best[label].get(key, value), value)
    for label, b in best.items():
        print(f"{label:5s} columns {b['columns_s'] * 1e3:6.1f} ms   load_file CPU "
              f"{b['load_cpu_s'] * 1e3:6.1f} ms (main thread {b['load_main_s'] * 1e3:6.1f}), "
              f"wall {b['load_wall_s'] * 1e3:6.1f} ms")
    if args.against:
        ratio = {k: best["base"][k] / best["this"][k] for k in best["this"]}
        print(f"base / this: columns x{ratio['columns_s']:.2f}, load_file CPU "
              f"x{ratio['load_cpu_s']:.2f} (main thread x{ratio['load_main_s']:.2f}), "
              f"wall x{ratio['load_wall_s']:.2f}  (min of {args.repeat})")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "columns.json").write_text(json.dumps(
        {"trace": str(args.trace), "repeat": args.repeat, "best": best,
         "machine": machine_info()}, indent=1))


if __name__ == "__main__":
    main()
