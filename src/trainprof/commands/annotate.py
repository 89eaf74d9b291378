"""``trainprof annotate``: a copy of a trace with trainprof's verdict on its timeline, for
Perfetto or chrome://tracing. The trace is analysed once; ``report.annotate.writer`` streams the copy
with the added events, written atomically (docs/reports.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import msgspec

from trainprof.analysis.overview.steps import find_steps
from trainprof.diagnose.findings import typed_findings
from trainprof.errors import TrainprofError
from trainprof.fileio import atomic_output
from trainprof.formatting import counted
from trainprof.pipeline import analyze
from trainprof.report.annotate import events as ae
from trainprof.report.annotate.critical_path import path_events
from trainprof.report.annotate.writer import copy_with_events
from trainprof.report.saved import is_saved_result, refuse_other_results
from trainprof.trace.load import load_file

_ENCODER = msgspec.json.Encoder()


def main(args: argparse.Namespace) -> int:
    """Write the annotated copy and say what it holds."""
    done = annotate(args.trace, args.output or default_output(args.trace))
    print(f"Wrote {done.path}: {counted(done.counters, 'counter event')} and {counted(done.findings, 'finding')} "
          "on the timeline. Open it in Perfetto (ui.perfetto.dev) or chrome://tracing.")
    return 0


class Annotated(msgspec.Struct):
    """What was written: the file, and how many counter and finding events were added."""

    path: Path
    counters: int
    findings: int


def annotate(trace_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> Annotated:
    """Write ``out_path``: ``trace_path`` plus counter tracks and one event per finding."""
    src, dst = Path(trace_path), Path(out_path)
    if src.is_dir():
        raise TrainprofError(f"{src} is a folder: annotate takes one trace file (one rank).")
    if is_saved_result(src):
        raise TrainprofError(f"{src} is a saved trainprof result: annotate needs the trace file "
                             "it was made from.")
    refuse_other_results(src, accepted=())
    if dst.exists() and dst.resolve() == src.resolve():
        raise TrainprofError("The annotated copy must not overwrite the trace it is made from.")
    added, counters, findings = _added_events(src)  # the trace's columns are freed here
    with atomic_output(dst) as out:
        copy_with_events(src, out, added)
    return Annotated(dst, counters, findings)


def _added_events(src: Path) -> tuple[bytes, int, int]:
    """The new events as comma-joined JSON, and how many counters and findings they hold."""
    trace = load_file(src)
    steps = find_steps(trace)
    analysis = analyze([trace])
    offset = ae.file_ts_offset(trace)
    thread = ae.main_thread(trace)
    counters = ae.utilization_counters(trace, offset)
    memory = analysis.ranks[0].sections.memory
    counters += ae.memory_counters(trace, memory, steps, offset, thread[0])
    findings = ae.finding_events(typed_findings(analysis.findings), steps, offset, thread,
                                 ae.finding_places(analysis.ranks[0], steps))
    counters += path_events(analysis.ranks[0].sections.critical_path, trace, offset)
    added = b",".join(_ENCODER.encode(e) for e in (*counters, *findings))
    return added, len(counters), len(analysis.findings)


def default_output(trace_path: str | os.PathLike[str]) -> Path:
    """``<name>.annotated.json.gz`` in the current folder."""
    name = Path(trace_path).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return Path(f"{name}.annotated.json.gz")
