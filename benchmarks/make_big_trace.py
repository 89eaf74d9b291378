"""Scale a real Kineto trace up by repeating it, for load benchmarks.

    .venv/bin/python benchmarks/make_big_trace.py SRC OUT [--target-bytes 1073741824] [--verify]

The source's events are written once as they are, then again as copies shifted later in time,
until the uncompressed JSON reaches ``--target-bytes``. Copy k is shifted by k times the whole
trace span (plus 1 µs), not by the ProfilerStep window: a trace's warm-up before its first step
and the GPU work that finishes after its last step would otherwise overlap the neighbouring
copy on the same threads and streams. Each copy renumbers what must stay unique and consistent:

* ``ProfilerStep#N`` continues the numbering (steps 2..6, then 7..11, ...);
* ``correlation``, ``External id`` and flow ``id`` move together by one stride (a power of ten
  above the largest of them), so that launches, kernels and their flow arrows still pair up;
* ``Ev Idx``, ``Sequence number`` and ``Python id``/``Python parent id`` each by their own stride.

Metadata (``ph: M``), the profiler's span (``cat: Trace``, stretched to cover every copy) and
global instant events (``Iteration Start``, ``Record Window End``, moved to the new end) appear
once, after the copies. The top-level keys are those of the source, in its order. The output
is written in chunks (never one big string), gzipped when OUT ends in ``.gz``.

Layout: events are written compact by default, which packs about 1.28 times as many events into
a byte as Kineto's own layout (df_index_resolver: 42 MB compact against 54 MB as recorded), so a
1 GiB file is a harsher test than a 1 GiB trace straight from the profiler. ``--indent`` writes
one field per line, about 0.87 times Kineto's density (61 MB), the lenient side.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
import time
from pathlib import Path

import orjson

DEFAULT_TARGET_BYTES = 2**30
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
#: Ids of launches, kernels and flows: one shared stride, as Kineto reuses one counter for them.
LINKED_ID_ARGS = ("correlation", "External id")
#: Other per-event counters, each group renumbered with its own stride.
OWN_ID_ARGS = (("Ev Idx",), ("Sequence number",), ("Python id", "Python parent id"))
WINDOW_END = "Record Window End"


def read_trace(path: Path) -> dict:
    """The whole source trace (orjson, or the standard library for integers beyond 64 bits)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def is_static(event: dict) -> bool:
    """Events that describe the whole recording and appear once: metadata, span, global marks."""
    return (
        event.get("ph") == "M"
        or event.get("cat") == "Trace"
        or (event.get("ph") == "i" and event.get("s") == "g")
    )


def stride_above(values: list[int]) -> int:
    """The smallest power of ten above every value (readable offsets: 344139 -> 1000000)."""
    top = max(values, default=0)
    return 10 ** max(1, len(str(abs(top))))


class Template:
    """The repeatable events, with every field a copy changes, so that a copy is one tight loop.

    The events are mutated in place for each copy (no per-copy dict copies): ``patches`` holds
    ``(container, key, original value, stride)`` and copy k writes ``original + k * stride``.
    """

    def __init__(self, events: list[dict]):
        self.events = [e for e in events if not is_static(e)]
        self.static = [e for e in events if is_static(e)]
        timed = [e for e in self.events if isinstance(e.get("ts"), int | float)]
        if not timed:
            raise SystemExit("the source trace has no timed events to repeat")
        start = min(e["ts"] for e in timed)
        end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
        self.start, self.end = start, end
        self.period = math.ceil(end - start) + 1
        self.patches: list[tuple[dict, str, int | float, int]] = [
            (e, "ts", e["ts"], self.period) for e in timed
        ]
        self._add_id_patches()
        self._add_step_patches()

    def _add_id_patches(self) -> None:
        linked = [(e, "id") for e in self.events if e.get("ph") in ("s", "t", "f")]
        args = [e["args"] for e in self.events if isinstance(e.get("args"), dict)]
        linked += [(a, k) for a in args for k in LINKED_ID_ARGS if k in a]
        groups = [linked] + [[(a, k) for a in args for k in keys if k in a] for keys in OWN_ID_ARGS]
        for group in groups:
            group = [(d, k) for d, k in group if type(d[k]) is int]
            if not group:
                continue
            stride = stride_above([d[k] for d, k in group])
            self.patches += [(d, k, d[k], stride) for d, k in group]

    def _add_step_patches(self) -> None:
        self.steps = [
            (e, int(m.group(1)))
            for e in self.events
            if (m := STEP_NAME.match(str(e.get("name", ""))))
        ]
        numbers = [n for _, n in self.steps]
        self.step_stride = max(numbers) - min(numbers) + 1 if numbers else 0

    def set_copy(self, k: int) -> None:
        """Make the template's events read as copy ``k`` (k = 0 is the source as it was)."""
        for container, key, value, stride in self.patches:
            container[key] = value + k * stride
        for event, number in self.steps:
            event["name"] = f"ProfilerStep#{number + k * self.step_stride}"

    def static_events(self, copies: int) -> list[dict]:
        """Metadata and global events once, stretched over ``copies`` copies."""
        shift = (copies - 1) * self.period
        out = []
        for event in self.static:
            event = dict(event)
            if event.get("cat") == "Trace" and isinstance(event.get("dur"), int | float):
                event["dur"] = event["dur"] + shift
            elif event.get("name") == WINDOW_END and isinstance(event.get("ts"), int | float):
                event["ts"] = event["ts"] + shift
            out.append(event)
        return out


def dumps(value, indent: bool = False) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else None)
    except TypeError:  # integers beyond 64 bits: the standard library writes them
        if indent:
            return json.dumps(value, indent=2).encode()
        return json.dumps(value, separators=(",", ":")).encode()


def dump_events(events: list[dict], indent: bool = False, chunk: int = 50_000):
    """The events as JSON array items (comma separated, no brackets), a chunk at a time."""
    for i in range(0, len(events), chunk):
        yield dumps(events[i : i + chunk], indent)[1:-1]


class CountingWriter:
    """A binary sink that counts the uncompressed bytes written through it."""

    def __init__(self, path: Path, compresslevel: int):
        gz = path.name.endswith(".gz")
        self.file = gzip.open(path, "wb", compresslevel=compresslevel) if gz else open(path, "wb")  # noqa: SIM115
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.bytes += len(data)

    def close(self) -> None:
        self.file.close()


def make_big_trace(
    src: Path,
    out: Path,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    compresslevel: int = 1,
    indent: bool = False,
    quiet: bool = False,
) -> dict:
    """Write ``out``: ``src`` repeated until its JSON is at least ``target_bytes``; returns figures."""
    start = time.perf_counter()
    doc = read_trace(src)
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise SystemExit(f"{src} is not a Kineto trace (no traceEvents list)")
    template = Template(events)
    del events
    static_bytes = sum(len(c) + 1 for c in dump_events(template.static_events(1), indent))

    sink = CountingWriter(out, compresslevel)
    copies = 0
    try:
        sink.write(b"{")
        for i, (key, value) in enumerate(doc.items()):
            sink.write((b", " if i else b"") + dumps(key) + b": ")
            if key != "traceEvents":
                # Kineto's own spacing for the small top-level values: some readers (HTA) find
                # the rank with a regex that wants the space in `"rank": 1`.
                sink.write(json.dumps(value).encode())
                continue
            sink.write(b"[")
            separator = b""  # before every array item but the first
            while copies == 0 or sink.bytes + static_bytes < target_bytes:
                template.set_copy(copies)
                for piece in dump_events(template.events, indent):
                    sink.write(separator + piece)
                    separator = b","
                copies += 1
                if not quiet:
                    print(
                        f"\rcopy {copies}: {sink.bytes / 1e6:,.0f} MB",
                        end="",
                        file=sys.stderr,
                        flush=True,
                    )
            for piece in dump_events(template.static_events(copies), indent):
                sink.write(separator + piece)
                separator = b","
            sink.write(b"]")
        sink.write(b"}")
    finally:
        sink.close()
        template.set_copy(0)
    if not quiet:
        print(file=sys.stderr)
    return {
        "source": str(src),
        "out": str(out),
        "copies": copies,
        "events": copies * len(template.events) + len(template.static),
        "steps": copies * len(template.steps),
        "json_bytes": sink.bytes,
        "file_bytes": out.stat().st_size,
        "layout": "indent" if indent else "compact",
        "period_us": template.period,
        "seconds": time.perf_counter() - start,
    }


def verify(path: Path) -> list[str]:
    """Problems found in a generated trace (empty when it is consistent). Loads it whole."""
    doc = read_trace(path)
    events = doc["traceEvents"]
    problems = []
    steps = [int(m.group(1)) for e in events if (m := STEP_NAME.match(str(e.get("name", ""))))]
    if len(steps) != len(set(steps)) or (
        steps and sorted(steps) != list(range(min(steps), max(steps) + 1))
    ):
        problems.append("ProfilerStep numbers are not unique and consecutive")
    gpu = [
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset")
        and "correlation" in e.get("args", {})
    ]
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver")
        and "correlation" in e.get("args", {})
    }
    if len(gpu) != len(set(gpu)):
        problems.append("GPU correlation ids are not unique")
    orphans = len(set(gpu) - launches)
    flows: dict[tuple, int] = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows[(e.get("cat"), e["id"], e["ph"])] = (
                flows.get((e.get("cat"), e["id"], e["ph"]), 0) + 1
            )
    if any(n > 1 for n in flows.values()):
        problems.append("a flow id starts or finishes more than once")
    problems += (
        [f"{orphans} GPU events have no launch with their correlation id"] if orphans else []
    )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a Kineto trace, .json or .json.gz")
    parser.add_argument("out", type=Path, help="where to write; gzipped when it ends in .gz")
    parser.add_argument(
        "--target-bytes",
        type=int,
        default=DEFAULT_TARGET_BYTES,
        help="minimum size of the uncompressed JSON (default 2**30, 1 GiB)",
    )
    parser.add_argument(
        "--compresslevel", type=int, default=1, help="gzip level for .gz output (default 1)"
    )
    parser.add_argument(
        "--indent",
        action="store_true",
        help="one field per line (orjson's 2-space indent) instead of compact JSON",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="read the output back and check ids and steps (needs ~8x its size in RAM)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = make_big_trace(
        args.src, args.out, args.target_bytes, args.compresslevel, args.indent, quiet=args.json
    )
    if args.verify:
        figures["problems"] = verify(args.out)
    if args.json:
        print(json.dumps(figures))
    else:
        print(
            f"{args.out}: {figures['json_bytes'] / 1e6:,.0f} MB of JSON ({figures['file_bytes'] / 1e6:,.0f} MB "
            f"on disk), {figures['copies']} copies, {figures['events']:,} events, {figures['steps']} steps, "
            f"{figures['seconds']:.1f} s"
        )
        if args.verify:
            print("verify:", "; ".join(figures["problems"]) or "ok")
    return 1 if figures.get("problems") else 0


if __name__ == "__main__":
    sys.exit(main())
