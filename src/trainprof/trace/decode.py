"""Kineto JSON to columns: a typed msgspec decode that keeps only the fields analysis needs.

The schema names the few ``args`` keys we read; msgspec skips every other key without building
Python objects for it, which is where the speed comes from. Values are typed ``Any`` where real
traces disagree on the type (ids as numbers or strings, ``tid`` as ``"stream 7"`` or ``7``).
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from trainprof.errors import TraceError


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
    ts: Any = None
    dur: Any = 0.0
    id: Any = None
    args: _Args | None = None


class _TraceFile(msgspec.Struct, gc=False):
    # The events stay raw here: they are decoded in chunks, so that a 1 GB trace never exists
    # as one list of Python objects.
    traceEvents: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    computeProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815


_METADATA_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "computeProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
)
_FILE_DECODER = msgspec.json.Decoder(_TraceFile)
_LIST_DECODER = msgspec.json.Decoder(list[_Event])
_FIRST_CHAR = re.compile(rb"\S")
#: Event arrays larger than this are decoded in pieces of about this size.
CHUNK_BYTES = 64 * 1024 * 1024
# Between two top-level events of Kineto's layout: "}," then a line break, then "{". A raw line
# break cannot occur inside a JSON string, so this never splits a string; a split inside a
# nested object fails to decode and falls back to decoding the array whole.
_EVENT_BOUNDARY = re.compile(rb"\}[ \t]*,[ \t]*\r?\n[ \t]*\{")


class SplitError(Exception):
    """A chunk boundary fell inside an event; decode the array whole instead."""


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path} is not a readable gzip file ({exc}).") from None
    if _FIRST_CHAR.search(data) is None:
        raise TraceError(f"{path} is empty.")
    return data


def decode(path: Path, data: bytes) -> tuple[memoryview, dict[str, Any]]:
    """The raw bytes of the event array, and the top-level metadata we keep."""
    first = _FIRST_CHAR.search(data)
    head = first.group(0) if first else b""
    if head == b"[":
        return memoryview(data), {}
    if head != b"{":
        start = first.start() if first else 0
        raise TraceError(f"{path} is not JSON (it starts with {data[start:start + 12]!r}).")
    with _clear_errors(path):
        parsed = _FILE_DECODER.decode(data)
    if not len(parsed.traceEvents):
        raise TraceError(f"{path} is JSON but not a trace: it has no 'traceEvents' list.")
    events = memoryview(parsed.traceEvents)
    if _FIRST_CHAR.search(events[:64]).group(0) != b"[":
        raise TraceError(f"{path} is not a Kineto trace: 'traceEvents' is not a list.")
    meta = {k: getattr(parsed, k) for k in _METADATA_KEYS if getattr(parsed, k) is not None}
    return events, meta


def _trace_error(path: Path, exc: Exception) -> TraceError:
    """msgspec's error as one clear sentence."""
    if isinstance(exc, msgspec.ValidationError):
        if str(exc).startswith("Number out of range"):
            where = str(exc).rpartition(" - at ")[2]
            return TraceError(f"{path} holds a number too large to represent (at {where}).")
        return TraceError(f"{path} is not a Kineto trace: {exc}.")
    return TraceError(f"{path} is not valid JSON (truncated or corrupt): {exc}.")


@contextmanager
def _clear_errors(path: Path) -> Iterator[None]:
    try:
        yield
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _trace_error(path, exc) from None


def event_chunks(path: Path, array: memoryview, whole: bool = False) -> Iterator[list[_Event]]:
    """Typed events of a raw JSON array, in pieces of about CHUNK_BYTES."""
    if whole or len(array) <= CHUNK_BYTES:
        with _clear_errors(path):
            yield _LIST_DECODER.decode(array)
        return
    body_start = bytes(array[:64]).index(b"[") + 1
    end = len(array)
    start = body_start
    while start < end:
        match = None
        if start + CHUNK_BYTES < end:
            match = _EVENT_BOUNDARY.search(array, start + CHUNK_BYTES)
        if match is None:
            piece = b"[" + bytes(array[start:end])  # the last piece still ends with "]"
            start = end
        else:
            piece = b"[" + bytes(array[start:match.start() + 1]) + b"]"
            start = match.end() - 1
        try:
            events = _LIST_DECODER.decode(piece)
        except msgspec.DecodeError:
            raise SplitError from None
        except msgspec.ValidationError as exc:
            raise _trace_error(path, exc) from None
        del piece
        yield events


