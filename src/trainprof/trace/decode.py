"""The msgspec schema of a Kineto trace: only the fields analysis needs.

The schema names the few ``args`` keys we read; msgspec skips every other key without building
Python objects for it, which is where the speed comes from. Values are typed ``Any`` where real
traces disagree on the type (ids as numbers or strings, ``tid`` as ``"stream 7"`` or ``7``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from trainprof.errors import TraceError
from trainprof.lazy import LazyPattern


class _Args(msgspec.Struct, gc=False):
    external_id: Any = msgspec.field(name="External id", default=None)
    external_id_old: Any = msgspec.field(name="external id", default=None)
    correlation: Any = None
    device: Any = None
    stream: Any = None
    blocks_per_sm: Any = msgspec.field(name="blocks per SM", default=None)
    occupancy: Any = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: Any = None
    device_type: Any = msgspec.field(name="Device Type", default=None)
    device_id: Any = msgspec.field(name="Device Id", default=None)
    mem_bytes: Any = msgspec.field(name="Bytes", default=None)
    total_allocated: Any = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Any = msgspec.field(name="Total Reserved", default=None)
    addr: Any = msgspec.field(name="Addr", default=None)
    # Kept raw (no Python objects built) and interned later: they repeat every step.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default_factory=msgspec.Raw)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default_factory=msgspec.Raw)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default_factory=msgspec.Raw)
    call_stack: msgspec.Raw = msgspec.field(name="Call stack", default_factory=msgspec.Raw)
    flops: Any = None
    # Launch configuration of kernels, and collective metadata (record_param_comms, NCCL).
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    shared_memory: Any = msgspec.field(name="shared memory", default=None)
    collective: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)

    def kernel_detail(self) -> dict[str, Any] | None:
        """A kernel's launch configuration (and collective metadata on NCCL kernels)."""
        if self.collective is not None:
            return self.detail()
        if self.grid is None and self.block is None:
            return None
        return {"grid": self.grid, "block": self.block, "registers": self.registers,
                "shared_memory": self.shared_memory}

    def detail(self) -> dict[str, Any] | None:
        """Launch configuration and collective metadata, when the event has any."""
        out = {k: getattr(self, k) for k in _DETAIL_FIELDS if getattr(self, k) is not None}
        return out or None


_DETAIL_FIELDS = ("grid", "block", "registers", "shared_memory", "collective", "in_nelems",
                  "out_nelems", "group_size", "dtype", "pg_name", "pg_ranks")


class _Event(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    # Numbers only: ``true`` or ``"5"`` as a time would give a wrong figure, so they are refused.
    ts: float | None = None
    dur: float | None = 0.0
    id: Any = None
    args: _Args | None = None


class _TraceFile(msgspec.Struct, gc=False):
    # The events stay raw here; trace/stream.py decodes them in chunks.
    traceEvents: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    computeProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    pytorch_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None


METADATA_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "computeProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "pytorch_version",  # versions, when the recording tool wrote them (analysis/analyze.py)
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
)
FILE_DECODER = msgspec.json.Decoder(_TraceFile)
LIST_DECODER = msgspec.json.Decoder(list[_Event])
_ONE_EVENT = msgspec.json.Decoder(_Event)
#: Values typed Any, as msgspec decodes them inside an event (trace/scan.py).
ANY_DECODER = msgspec.json.Decoder()

#: Each repair's note, for one event and for several ({n}: how many), in the order said.
_REPAIR_NOTES = {
    "args": ("1 event had 'args' that are not an object; it was read without its args.",
             "{n} events had 'args' that are not an object; they were read without their args."),
    "entry": ("1 entry of 'traceEvents' is not an event (a number, text or a list) and skipped.",
              "{n} entries of 'traceEvents' are not an event (a number, text or a list) and "
              "skipped."),
    "flow_ts": ("1 flow event had a time that is not a number; it links nothing.",
                "{n} flow events had a time that is not a number; they link nothing."),
    "negative_dur": ("1 event had a negative duration (a recording glitch), read as 0.",
                     "{n} events had a negative duration (a recording glitch), read as 0."),
}


def repair_notes(repairs: Counter) -> list[str]:
    """What ``decode_leniently`` repaired, in the words the user reads, once per kind."""
    return [(one if repairs[kind] == 1 else several.format(n=repairs[kind]))
            for kind, (one, several) in _REPAIR_NOTES.items() if repairs[kind]]


_FLOW_PHASES = ("s", "f", "t")


def decode_leniently(path: Path, piece: bytes | bytearray) -> tuple[list[_Event], Counter]:
    """The events of a piece that the typed decoder refused, read one by one as a trace viewer
    would: an entry that is not an object is skipped, ``args`` that are not an object are
    dropped (both counted in the returned ``Counter``); any other wrong field still refuses the
    file, since reading on would give a wrong figure."""
    try:
        items = msgspec.json.decode(piece)
    except msgspec.DecodeError as exc:
        raise trace_error(path, exc) from None
    events: list[_Event] = []
    repairs: Counter = Counter()
    for item in items:
        if not isinstance(item, dict):
            repairs["entry"] += 1
            continue
        try:
            events.append(_ONE_EVENT.decode(msgspec.json.encode(item)))
            continue
        except msgspec.ValidationError as exc:
            refused = exc
        repaired, kinds = dict(item), []
        if not isinstance(item.get("args"), dict | None):
            repaired.pop("args")
            kinds.append("args")
        if item.get("ph") in _FLOW_PHASES and not isinstance(item.get("ts"), int | float | None):
            repaired["ts"] = None  # a flow without a time links nothing, and times no op
            kinds.append("flow_ts")
        if not kinds:
            raise trace_error(path, refused, one_event=True)
        try:
            events.append(_ONE_EVENT.decode(msgspec.json.encode(repaired)))
        except msgspec.ValidationError:
            raise trace_error(path, refused, one_event=True) from None
        repairs.update(kinds)
    return events, repairs


def metadata_of(parsed: _TraceFile) -> dict[str, Any]:
    """The top-level keys we keep, when present."""
    return {k: getattr(parsed, k) for k in METADATA_KEYS if getattr(parsed, k) is not None}


def trace_error(path: Path, exc: Exception, one_event: bool = False) -> TraceError:
    """msgspec's error as one clear sentence (``one_event``: it came from decoding one event
    on its own, so its location is inside an event)."""
    if isinstance(exc, msgspec.ValidationError):
        problem, _, at = str(exc).partition(" - at ")
        where = _where(at.replace("$", "$[0]", 1) if one_event else at)
        if problem.startswith("Number out of range"):
            return TraceError(f"{path} holds a number too large to represent (in {where}).")
        problem = _in_words(problem)
        return TraceError(f"{path} is not a Kineto trace: {where} is wrong ({problem}).")
    return TraceError(f"{path} is not valid JSON (truncated or corrupt): {exc}.")


_TYPE_WORDS = {"object": "an object", "array": "a list", "str": "text", "int": "an integer",
               "float": "a number", "bool": "true or false", "null": "null"}
_EXPECTED = LazyPattern(r"Expected `([^`]*)`, got `([^`]*)`")


def _in_words(problem: str) -> str:
    """msgspec's "Expected `float | null`, got `bool`" as "expected a number, got true or
    false": the decoder's type syntax is not the user's business."""
    found = _EXPECTED.fullmatch(problem.strip())
    if found is None:
        return problem.replace("Expected", "expected", 1)
    wanted = [_TYPE_WORDS.get(t.strip(), t.strip()) for t in found.group(1).split("|")]
    wanted = [w for w in wanted if w != "null"] or ["null"]
    got = _TYPE_WORDS.get(found.group(2), found.group(2))
    return f"expected {' or '.join(wanted)}, got {got}"


def _where(at: str) -> str:
    """msgspec's location (``$[722].args``) in words; the index is left out, as it counts from
    the start of a decoded piece, not of the file."""
    at = at.strip("`")
    head, dot, rest = at.partition(".")
    if re.fullmatch(r"\$\[\d+\]", head):
        return f"an event's '{rest}'" if dot else "an event"
    return f"'{at.removeprefix('$.')}'" if at else "the file"
