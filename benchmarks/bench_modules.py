"""What the module view (analysis/sections/modules.py) adds to the analysis: one process, interleaved.

    .venv/bin/python benchmarks/bench_modules.py [--repeat 5] [TRACE ...]

Each trace is loaded once; then ``analyze_trace`` runs ``--repeat`` times with every section and
as many times without the ``modules`` section, alternating, on fresh copies of the loaded trace
(so that no cached fact is shared between runs); the section's own time is taken inside the
runs. Medians, and the section's time as a share of the analysis without it (the steadier
figure on a busy machine), go to the table and to ``benchmarks/out/modules.json``. Default traces: df_index_resolver (no module events: the
cost of looking) and the two TraceLens H100 traces (module events, no backward).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

from measure import OUT_DIR, REFERENCE_TRACE, REPO_ROOT, machine_info, median, relative
from trainprof.analysis.analyze import analyze_trace
from trainprof.analysis.sections import registry as sections
from trainprof.analysis.sections.modules import module_tree
from trainprof.trace.load import load_file

H100 = REPO_ROOT / "tests" / "data" / "traces" / "tracelens" / "tests" / "traces" / "h100"
DEFAULT_TRACES = [REFERENCE_TRACE, H100 / "facebook_timesformer-base-finetuned-k400__1016002.json.gz",
                  H100 / "gaunernst_bert-small-uncased__1016001.json.gz"]


SECTION_TIMES: list[float] = []


def timed_section(trace, steps):
    """The modules section, its own time noted."""
    start = time.perf_counter()
    result = module_tree(trace, steps)
    SECTION_TIMES.append(time.perf_counter() - start)
    return result


def timed(trace, with_modules: bool) -> float:
    saved = list(sections.SECTIONS)
    sections.SECTIONS[:] = [(name, timed_section if name == "modules" else fn)
                            for name, fn in saved if with_modules or name != "modules"]
    try:
        fresh = copy.copy(trace)
        fresh.__dict__.pop("_trainprof_shared_facts", None)
        start = time.perf_counter()
        analyze_trace(fresh)
        return time.perf_counter() - start
    finally:
        sections.SECTIONS[:] = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("traces", nargs="*", type=Path)
    args = parser.parse_args()
    rows = []
    for path in args.traces or DEFAULT_TRACES:
        trace = load_file(path)
        timed(trace, True)  # warm-up
        runs: dict[bool, list[float]] = {True: [], False: []}
        SECTION_TIMES.clear()
        for i in range(args.repeat):
            for flag in ((False, True) if i % 2 else (True, False)):
                runs[flag].append(timed(trace, flag))
        without, with_ = median(runs[False]), median(runs[True])
        section = median(SECTION_TIMES)
        rows.append({"trace": relative(path), "events": len(trace.events), "without_s": without,
                     "with_s": with_, "section_s": section, "section_ratio": section / without})
        print(f"{path.name[:44]:44}  analysis without {without:7.3f} s, with {with_:7.3f} s; "
              f"the section {section * 1000:7.1f} ms = {section / without:6.1%} of it")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / "modules.json"
    out.write_text(json.dumps({"machine": machine_info(), "repeat": args.repeat, "rows": rows},
                              indent=2))
    print(f"written to {relative(out)}")


if __name__ == "__main__":
    main()
