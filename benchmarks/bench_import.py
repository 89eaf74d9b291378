"""What importing trainprof costs, against an older revision measured in the same run.

    .venv/bin/python benchmarks/bench_import.py [--repeat 15] [--baseline REV] [--module M]

Each import runs in its own fresh process (``python -X importtime -c "import M"``), the
revisions interleaved, with every revision's bytecode cached first (measure.cache_bytecode).
From each ``-X importtime`` report it takes, in ms:

* ``whole``: the module's cumulative import time (everything it pulls in);
* ``numpy``: numpy's cumulative time, numpy.ma included (trainprof imports it with the
  analyses: trainprof/analysis/__init__.py);
* ``own``: the sum of trainprof's own modules' self times (what trainprof's code costs);
* ``other``: the rest (the standard library, msgspec, ...).

The figures are medians; the ratios are this revision's over the baseline's. The baseline is
checked out into a temporary git worktree. Results go to ``benchmarks/out/import.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from measure import OUT_DIR, REPO_ROOT, cache_bytecode, machine_info, median

_ROW = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def parse(report: str, module: str) -> dict[str, float]:
    """The figures of one ``-X importtime`` report, in ms."""
    own = numpy = whole = 0
    for line in report.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        self_us, cumulative_us, name = int(m[1]), int(m[2]), m[4]
        if name.split(".")[0] == "trainprof":
            own += self_us
        if name.split(".")[0] == "numpy":
            numpy += self_us
        if name == module:
            whole = cumulative_us
    return {"whole": whole / 1000, "numpy": numpy / 1000, "own": own / 1000,
            "other": (whole - numpy - own) / 1000}


def measure(src: Path, module: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(src), "PATH": ""})
    return parse(done.stderr, module)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", default="7880b37",
                        help="the revision to compare with (default: the last before trainprof's "
                             "types became msgspec Structs)")
    parser.add_argument("--module", default="trainprof.pipeline")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "-q", "--detach",
                        str(base), args.baseline], check=True)
        try:
            cache_bytecode()
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(base / "src")],
                           check=True, stdout=subprocess.DEVNULL)
            sources = {"this": REPO_ROOT / "src", "baseline": base / "src"}
            runs: dict[str, list[dict[str, float]]] = {k: [] for k in sources}
            for _ in range(args.repeat):
                for name, src in sources.items():
                    runs[name].append(measure(src, args.module))
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force",
                            str(base)], check=False)
    figures = {name: {k: median([r[k] for r in rs]) for k in rs[0]} for name, rs in runs.items()}
    ratios = {k: figures["this"][k] / figures["baseline"][k] for k in figures["this"]
              if figures["baseline"][k]}
    print(f"import {args.module}, median of {args.repeat} fresh processes, ms")
    print(f"{'':10}" + "".join(f"{k:>9}" for k in figures["this"]))
    for name, row in figures.items():
        print(f"{name:10}" + "".join(f"{v:9.1f}" for v in row.values()))
    print(f"{'ratio':10}" + "".join(f"{ratios.get(k, 0):9.2f}" for k in figures["this"]))
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "import.json").write_text(json.dumps({
        "module": args.module, "baseline": args.baseline, "repeat": args.repeat,
        "ms": figures, "ratio": ratios, "machine": machine_info()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
