"""CPU seconds of each section of one loaded trace, and against another checkout's code.

    .venv/bin/python benchmarks/bench_sections.py [TRACE] [--repeat 3] [--against SRC]

The trace is loaded once. Each round runs every overview and deep section in the order the
analysis runs them, on a fresh copy of the trace object (same columns, no facts cached by an
earlier round), and takes each section's CPU time (``time.process_time``); the table shows the
least of the rounds. ``--against SRC`` (a checkout's ``src`` folder, e.g. a worktree of main)
imports that code as a second package in the same process and runs it interleaved with this
one, round by round, on the same columns: the ratio is then free of the machine's load, and each
section's results are compared (they must be equal). Figures go to ``benchmarks/out/sections.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import OUT_DIR, REFERENCE_TRACE

BASE = "trainprof_base"


def import_copy(src: Path, into: Path) -> str:
    """``src/trainprof`` copied as the package ``trainprof_base`` (its imports rewritten)."""
    target = into / BASE
    shutil.copytree(src / "trainprof", target, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in target.rglob("*.py"):
        text = f.read_text()
        text = re.sub(r"\b(from|import) trainprof([. ])", rf"\1 {BASE}\2", text)
        f.write_text(text.replace('"trainprof.', f'"{BASE}.'))
    sys.path.insert(0, str(into))
    return BASE


def pipeline(package: str) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """The package's trace model, step finder and (name, section) in the analysis's order."""
    model = importlib.import_module(f"{package}.trace.model")
    steps = importlib.import_module(f"{package}.analysis.overview.steps")
    rank = importlib.import_module(f"{package}.analysis.overview.rank")
    registry = importlib.import_module(f"{package}.analysis.sections.registry")
    return model, steps.find_steps, [*rank.OVERVIEW_SECTIONS.items(), *registry.SECTIONS]


def fresh(trace: Any, model: Any) -> Any:
    """The trace's columns in new objects of ``model``'s classes: nothing cached on them."""
    def columns(obj: Any, cls: type) -> Any:
        return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)})
    return model.Trace(path=trace.path, rank=trace.rank, window=trace.window, t0_us=trace.t0_us,
                       events=columns(trace.events, model.Events),
                       memory=columns(trace.memory, model.MemoryEvents),
                       flows=columns(trace.flows, model.Flows), threads=trace.threads,
                       metadata=trace.metadata, notes=list(trace.notes))


def digest(result: Any) -> str:
    """A comparable text of a section's result (floats to the last bit)."""
    def plain(x: Any) -> Any:
        if hasattr(x, "to_dict") and not isinstance(x, type):
            try:
                return plain(x.to_dict())
            except TypeError:
                pass
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if hasattr(x, "tolist"):
            return plain(x.tolist())
        if isinstance(x, dict):
            return {repr(k): plain(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [plain(v) for v in x]
        return repr(x)
    return repr(plain(result)).replace(BASE, "trainprof")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=REFERENCE_TRACE)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another checkout's src folder")
    args = ap.parse_args()
    from trainprof.trace.load import load_file

    loaded = load_file(args.trace)
    runs = {"this": pipeline("trainprof")}
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            runs = {"base": pipeline(import_copy(args.against, Path(tmp))), **runs}
        best: dict[str, dict[str, float]] = {k: {} for k in runs}
        digests: dict[str, dict[str, str]] = {k: {} for k in runs}
        for round_ in range(args.repeat):
            for label, (model, find_steps, sections) in runs.items():
                trace = fresh(loaded, model)
                steps = find_steps(trace)
                for name, section in sections:
                    cpu = time.process_time()
                    result = section(trace, steps)
                    took = time.process_time() - cpu
                    best[label][name] = min(best[label].get(name, took), took)
                    if round_ == 0 and args.against:
                        digests[label][name] = digest(result)
    names = list(best["this"])
    header = f"{'section':15s}" + "".join(f"{k:>9s}" for k in runs)
    print(header + ("    ratio" if args.against else ""))
    for name in [*names, "total"]:
        # A section new in this checkout counts 0 s in the base.
        row = {k: (sum(best[k].values()) if name == "total" else best[k].get(name, 0.0))
               for k in runs}
        line = f"{name:15s}" + "".join(f"{row[k]:9.3f}" for k in runs)
        if args.against:
            line += f"   x{row['base'] / max(row['this'], 1e-9):.2f}"
            if name != "total" and name in digests["base"] \
                    and digests["base"][name] != digests["this"][name]:
                line += "  RESULTS DIFFER"
        print(line)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / "sections.json"
    out.write_text(json.dumps({"trace": str(args.trace), "repeat": args.repeat,
                               "cpu_s": best}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
