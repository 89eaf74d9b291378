"""``trainprof annotate``: a copy of a trace with trainprof's verdict on its timeline.

The trace is analysed once (columns, not the JSON text), then copied as a stream: the bytes
are read block by block (gunzipped when needed), the added events (``annotate_events``) are
written just after the ``"traceEvents": [`` that opens the event array, and everything else is
passed through unchanged. So the file is never held in memory, and every event, key and
metadata field of the original stays as it was. The output is gzipped when its name ends in
``.gz`` and written atomically (a temporary file in the same folder, then a rename).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import msgspec

from trainprof.analysis.steps import find_steps
from trainprof.errors import TraceError, TrainprofError
from trainprof.fileio import atomic_output
from trainprof.report import annotate_events as ae
from trainprof.report.annotate_path import path_events
from trainprof.report.saved import is_saved_result, refuse_other_results
from trainprof.trace.load import load_file
from trainprof.trace.stream import byte_blocks

_FIRST_CHAR = re.compile(rb"\S")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ENCODER = msgspec.json.Encoder()


@dataclass
class Annotated:
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
    from trainprof.pipeline import analyze

    trace = load_file(src)
    steps = find_steps(trace)
    analysis = analyze([trace])
    offset = ae.file_ts_offset(trace)
    thread = ae.main_thread(trace)
    counters = ae.utilization_counters(trace, offset)
    memory = analysis.ranks[0].sections.memory
    counters += ae.memory_counters(trace, memory, steps, offset, thread[0])
    findings = ae.finding_events([f.to_dict() for f in analysis.findings], steps, offset, thread,
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


def copy_with_events(src: Path, out: IO[bytes], added: bytes) -> None:
    """Stream ``src`` into ``out`` with ``added`` (comma-joined JSON events) first in the array."""
    blocks = byte_blocks(src)
    buf = bytearray()
    pos = _array_start(buf, blocks, src)
    while not bytes(buf[pos:]).strip():  # is the array empty? look at its first character
        block = next(blocks, None)
        if block is None:
            break
        buf += block
    empty = bytes(buf[pos:]).lstrip().startswith(b"]")
    out.write(buf[:pos])
    out.write(added)
    if added and not empty:
        out.write(b",")
    out.write(buf[pos:])
    for block in blocks:
        out.write(block)


def _array_start(buf: bytearray, blocks: Iterator[bytes], src: Path) -> int:
    """Read into ``buf`` until the event array's ``[`` is found; the position after it."""
    searched = 0
    while True:
        first = _FIRST_CHAR.search(buf)
        if first is not None:
            head = buf[first.start()]
            if head == ord("["):
                return first.end()
            if head != ord("{"):
                raise TraceError(f"{src} is not a JSON trace.")
            match = _EVENTS_KEY.search(buf, searched)
            while match is not None:
                if _opens_the_array(buf[:match.start()]):
                    return match.end()
                match = _EVENTS_KEY.search(buf, match.start() + 1)
            searched = max(len(buf) - 32, 0)
        block = next(blocks, None)
        if block is None:
            raise TraceError(f"{src} has no 'traceEvents' list.")
        buf += block


def _opens_the_array(before: bytearray) -> bool:
    """Whether the key found is the top-level one (not text inside some earlier value)."""
    try:
        return isinstance(msgspec.json.decode(bytes(before) + b'"traceEvents": []}'), dict)
    except msgspec.DecodeError:
        return False
