"""The critical path of one window of three real traces, by trainprof and by HTA, side by side:
the split and the kernels on the path. The windows: the AlexNet window HTA's own tests use, and
one ``ProfilerStep`` of two GPU-bound traces (``ns_resolution_trace``, V100 ResNet; TimeSformer,
H100).

    .venv/bin/python benchmarks/critical_path_vs_hta.py [--hta-python benchmarks/.venv-hta/bin/python]

HTA (``HolisticTraceAnalysis``, with pandas < 2.3) runs in its own interpreter; without it the
trainprof side is printed alone. The figures go to ``benchmarks/out/critical_path_vs_hta.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from measure import OUT_DIR, REPO_ROOT

TRACES = REPO_ROOT / "tests" / "data" / "traces"
#: (name, trace, annotation, instance) of each window compared.
CASES = (
    ("alexnet", TRACES / "hta/tests/data/critical_path/alexnet"
     / "benchmark_result_2869224_1695835535_trace.json.gz",
     "[param|pytorch.model.alex_net|0|0|0|measure|forward]", 1),  # HTA's tests: the second
    ("ns_resolution", TRACES / "hta/tests/data/ns_resolution_trace"
     / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "ProfilerStep#103", 0),
    ("timesformer", TRACES / "tracelens/tests/traces/h100"
     / "facebook_timesformer-base-finetuned-k400__1016002.json.gz", "ProfilerStep#6", 0),
)

HTA_WORKER = r'''
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
cp, ok = a.critical_path_analysis(rank=0, annotation=sys.argv[2], instance_id=int(sys.argv[3]))
df = cp.get_critical_path_breakdown()
total = float(df.duration.sum())
split = (df.groupby("bound_by").duration.sum() / total * 100).to_dict()
kernels = sorted(set(df[df.stream >= 0].s_name.astype(str)))
print(json.dumps({"path_us": total, "split_pct": split, "gpu_names": kernels,
                  "edges": int(len(df))}))
'''


def short_name(name: str) -> str:
    """A kernel's name as HTA shortens it: no ``void``, templates, arguments or anonymous
    namespaces (``at::native::::max_pool_forward_nchw``)."""
    name = name.replace("(anonymous namespace)", "").removeprefix("void ")
    for mark in ("<", "("):
        name = name.split(mark, 1)[0]
    return name.strip()


def trainprof_side(trace_path: Path, annotation: str, instance: int) -> dict:
    import numpy as np

    sys.path.insert(0, str(REPO_ROOT / "src"))  # unless TRAINPROF_SRC names another tree
    if os.environ.get("TRAINPROF_SRC"):
        sys.path.insert(0, os.environ["TRAINPROF_SRC"])
    from trainprof.analysis.critical_path import critical_path
    from trainprof.analysis.overview.steps import StepWindows, find_steps
    from trainprof.trace.load import load_file

    trace = load_file(trace_path)
    ev = trace.events
    if annotation.startswith("ProfilerStep#"):  # the step as the analysis sees it
        result = critical_path(trace, find_steps(trace))
        step = next(s for s in result.steps if s.step == int(annotation.split("#")[1]))
    else:
        hits = np.flatnonzero(np.array(ev.names, dtype=object)[ev.name] == annotation)
        i = hits[instance]
        window = StepWindows(numbers=np.array([1]), starts=ev.ts[[i]], ends=ev.end[[i]],
                             source="annotation")
        result = critical_path(trace, window)
        step = result.steps[0]
    pieces = step.pieces.longest(len(step.pieces))
    host = sum(p.end_us - p.start_us for p in pieces if p.lane.startswith("host"))
    gpu_work = sum(p.end_us - p.start_us for p in pieces
                   if p.lane.startswith("GPU") and p.category in
                   ("gpu_compute", "gpu_communication", "copies"))
    gpu_gaps = sum(p.end_us - p.start_us for p in pieces
                   if p.lane.startswith("GPU") and p.category not in
                   ("gpu_compute", "gpu_communication", "copies"))
    return {"step_us": step.step_us,
            "split_pct": {k: 100 * v / step.step_us for k, v in step.split_us.items()},
            "host_lanes_pct": 100 * host / step.step_us,
            "gpu_work_pct": 100 * gpu_work / step.step_us,
            "gpu_gaps_pct": 100 * gpu_gaps / step.step_us,
            "gpu_names": sorted({short_name(p.name) for p in pieces
                                 if p.lane.startswith("GPU") and p.name}),
            "top_what_if": result.items[0].to_dict() if result.items else None}


def hta_side(python: str, trace_path: Path, annotation: str, instance: int) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(trace_path, tmp)  # HTA reads a folder of ranks
        out = subprocess.run([python, "-c", HTA_WORKER, tmp, annotation, str(instance)],
                             capture_output=True, text=True, timeout=600)
    if out.returncode:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(name: str, hta_python: str, trace_path: Path, annotation: str,
            instance: int) -> dict:
    """Both sides on one window, printed."""
    ours = trainprof_side(trace_path, annotation, instance)
    hta = (hta_side(hta_python, trace_path, annotation, instance)
           if Path(hta_python).exists() else None)
    result = {"trainprof": ours, "hta": hta}
    print(f"== {name} ({annotation} #{instance})")
    print(json.dumps({k: v for k, v in ours.items() if k != "gpu_names"}, indent=1))
    if hta:
        hta["gpu_names"] = sorted({short_name(n) for n in hta["gpu_names"]})
        shared = set(ours["gpu_names"]) & set(hta["gpu_names"])
        result["gpu_names_both"] = len(shared)
        print(json.dumps({k: v for k, v in hta.items() if k != "gpu_names"}, indent=1))
        print(f"GPU names on the path: trainprof {len(ours['gpu_names'])}, HTA "
              f"{len(hta['gpu_names'])}, both {len(shared)}")
        print("only trainprof:", sorted(set(ours["gpu_names"]) - set(hta["gpu_names"]))[:10])
        print("only HTA:", sorted(set(hta["gpu_names"]) - set(ours["gpu_names"]))[:10])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", default=str(REPO_ROOT / "benchmarks" / ".venv-hta" / "bin"
                                                    / "python"))
    args = parser.parse_args()
    results = {}
    for name, trace_path, annotation, instance in CASES:
        results[name] = compare(name, args.hta_python, trace_path, annotation, instance)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "critical_path_vs_hta.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
