"""Kineto JSON to columns: a typed msgspec decode that keeps only the fields analysis needs.

The schema names the few ``args`` keys we read; msgspec skips every other key without building
Python objects for it, which is where the speed comes from. Values are typed ``Any`` where real
traces disagree on the type (ids as numbers or strings, ``tid`` as ``"stream 7"`` or ``7``).
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from trainprof.errors import TraceError
from trainprof.trace import model
from trainprof.trace.model import Events, Flows, Kind, MemoryEvents


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
    traceEvents: list[_Event] | None = None  # noqa: N815 (Kineto's key)
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
_FIRST_CHAR = re.compile(rb"\S")
_LIST_DECODER = msgspec.json.Decoder(list[_Event])


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


def decode(path: Path, data: bytes) -> tuple[list[_Event], dict[str, Any]]:
    """Parse the JSON into typed events and the top-level metadata we keep."""
    first = _FIRST_CHAR.search(data)
    head = first.group(0) if first else b""
    try:
        if head == b"[":
            return _LIST_DECODER.decode(data), {}
        if head != b"{":
            start = first.start() if first else 0
            raise TraceError(f"{path} is not JSON (it starts with {data[start:start + 12]!r}).")
        parsed = _FILE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Number out of range"):
            where = str(exc).rpartition(" - at ")[2]
            raise TraceError(f"{path} holds a number too large to represent (at {where}).") from None
        raise TraceError(f"{path} is not a Kineto trace: {exc}.") from None
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path} is not valid JSON (truncated or corrupt): {exc}.") from None
    if parsed.traceEvents is None:
        raise TraceError(f"{path} is JSON but not a trace: it has no 'traceEvents' list.")
    meta = {k: getattr(parsed, k) for k in _METADATA_KEYS if getattr(parsed, k) is not None}
    return parsed.traceEvents, meta


def _int_or(value: Any, default: int) -> int:
    if type(value) is int:
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]  # "stream 7"
        if digits.lstrip("-").isdigit():
            return int(digits)
    return default


def _float_or_nan(value: Any) -> float:
    if type(value) is float or type(value) is int:
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _id_column(values: list[Any]) -> np.ndarray:
    """int64 ids (-1 when absent); ids beyond 62 bits or that are not integers get distinct
    codes from 2**62 up, so that equal ids stay equal and joins still work."""
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):
        codes: dict[Any, int] = {}
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            if type(v) is int and -1 <= v < 2**62:
                out[i] = v
            else:
                out[i] = codes.setdefault(v, 2**62 + len(codes))
        return out


def to_columns(path: Path, events: list[_Event]) -> tuple[Events, MemoryEvents, Flows, list, float]:
    """Columns for complete, memory and flow events, times relative to the earliest event."""
    x_events = [e for e in events if e.ph == "X"]
    mem_events = [e for e in events if e.name == "[memory]" and e.ph in ("i", "I")]
    flow_events = [e for e in events if e.ph in ("s", "f", "t")]
    if not x_events and not mem_events:
        raise TraceError(f"{path} holds no trace events (the profiler recorded nothing).")
    threads: dict[tuple[Any, Any], int] = {}
    try:
        first = x_events if x_events else mem_events
        t0 = math.floor(min(e.ts for e in first))
    except TypeError:
        raise TraceError(f"{path} has events without a numeric 'ts' timestamp.") from None
    except (OverflowError, ValueError):
        raise TraceError(f"{path} has a timestamp that is not a finite number.") from None
    return (
        _complete_columns(path, x_events, threads, t0),
        _memory_columns(path, mem_events, t0),
        _flow_columns(path, flow_events, threads, t0),
        list(threads),
        float(t0),
    )


def _numbers(path: Path, values: list[Any], what: str) -> np.ndarray:
    """float64 column from Python numbers (None -> nan); a non-number is a TraceError."""
    try:
        return np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = np.array([_float_or_nan(v) for v in values], dtype=np.float64)
        if what in ("ts", "dur") and np.isnan(out).any():
            raise TraceError(f"{path} has an event whose '{what}' is not a number.") from None
        return out


def _thread_ids(events: list[_Event], threads: dict) -> np.ndarray:
    """Index of each event's (pid, tid) in ``threads``, adding threads not seen yet."""
    keys = [(e.pid, e.tid) for e in events]
    for key in dict.fromkeys(keys):
        if key not in threads:
            threads[key] = len(threads)
    return np.array([threads[k] for k in keys], dtype=np.int32)


def _complete_columns(path: Path, events: list[_Event], threads: dict, t0: float) -> Events:
    n = len(events)
    names: list[str] = []
    by_key: dict[tuple[Any, Any], tuple[int, int, int]] = {}

    def describe(key: tuple[Any, Any]) -> tuple[int, int, int]:
        cat, nm = (k if isinstance(k, str) else str(k) for k in key)
        kind = model.classify(cat, nm)
        by_key[key] = hit = (int(kind), len(names), model.name_flags(kind, nm))
        names.append(nm)
        return hit

    hits = [by_key.get(k) or describe(k) for k in [(e.cat, e.name) for e in events]]
    kind = np.array([h[0] for h in hits], dtype=np.uint8)
    name = np.array([h[1] for h in hits], dtype=np.int32)
    flags = np.array([h[2] for h in hits], dtype=np.uint8)
    del hits
    ts_arr = _numbers(path, [e.ts for e in events], "ts") - t0
    dur_arr = _numbers(path, [e.dur for e in events], "dur")
    if not (np.isfinite(ts_arr).all() and np.isfinite(dur_arr).all()):
        raise TraceError(f"{path} has a timestamp or duration that is not a finite number.")
    dur_arr = np.maximum(dur_arr, 0.0)  # a negative duration is a recording glitch, not time

    args = [e.args for e in events]
    corr = [-1 if a is None or a.correlation is None else a.correlation for a in args]
    ext = [
        -1 if a is None else a.external_id if a.external_id is not None
        else -1 if a.external_id_old is None else a.external_id_old
        for a in args
    ]
    # Device-side fields only for the (few) kernels, copies and memsets.
    device_idx = np.flatnonzero(np.isin(kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]))
    device = np.full(n, -1, dtype=np.int16)
    stream = np.full(n, -1, dtype=np.int64)
    bps = np.full(n, np.nan, dtype=np.float32)
    occ = np.full(n, np.nan, dtype=np.float32)
    nbytes = np.full(n, np.nan, dtype=np.float64)
    if len(device_idx):
        dev_events = [events[i] for i in device_idx]
        dev_args = [args[i] or _NO_ARGS for i in device_idx]
        device[device_idx] = [
            _int_or(a.device if a.device is not None else e.pid, -1)
            for e, a in zip(dev_events, dev_args, strict=True)
        ]
        stream[device_idx] = [
            _int_or(a.stream if a.stream is not None else e.tid, -1)
            for e, a in zip(dev_events, dev_args, strict=True)
        ]
        bps[device_idx] = _numbers(path, [a.blocks_per_sm for a in dev_args], "args")
        occ[device_idx] = _numbers(path, [a.occupancy for a in dev_args], "args")
        nbytes[device_idx] = _numbers(path, [a.bytes for a in dev_args], "args")
    order = np.argsort(ts_arr, kind="stable")
    cols = Events(
        kind=kind,
        name=name,
        ts=ts_arr,
        dur=dur_arr,
        tid=_thread_ids(events, threads),
        device=device,
        stream=stream,
        correlation=_id_column(corr),
        external_id=_id_column(ext),
        blocks_per_sm=bps,
        occupancy=occ,
        nbytes=nbytes,
        flags=flags,
        names=names,
    )
    return _take(cols, order)


_NO_ARGS = _Args()


def _take(ev: Events, order: np.ndarray) -> Events:
    if len(order) and np.all(order[1:] > order[:-1]):
        return ev
    return Events(
        **{
            f: getattr(ev, f)[order]
            for f in ["kind", "name", "ts", "dur", "tid", "device", "stream", "correlation", "external_id", "blocks_per_sm", "occupancy", "nbytes", "flags"]
        },
        names=ev.names,
    )


def _memory_columns(path: Path, events: list[_Event], t0: float) -> MemoryEvents:
    args = [e.args or _NO_ARGS for e in events]
    ts = _numbers(path, [e.ts for e in events], "ts") - t0
    order = np.argsort(ts, kind="stable")

    def column(values: list[Any]) -> np.ndarray:
        return _numbers(path, values, "args")[order]

    return MemoryEvents(
        ts=ts[order],
        device_type=np.nan_to_num(column([a.device_type for a in args]), nan=-1).astype(np.int8),
        device_id=np.nan_to_num(column([a.device_id for a in args]), nan=-1).astype(np.int16),
        nbytes=column([a.mem_bytes for a in args]),
        total_allocated=column([a.total_allocated for a in args]),
        total_reserved=column([a.total_reserved for a in args]),
        addr=column([a.addr for a in args]),
    )


def _flow_columns(path: Path, events: list[_Event], threads: dict, t0: float) -> Flows:
    return Flows(
        id=_id_column([-1 if e.id is None else e.id for e in events]),
        phase=np.array([e.ph != "s" for e in events], dtype=np.uint8),
        ts=_numbers(path, [e.ts for e in events], "ts") - t0,
        tid=_thread_ids(events, threads),
        forward_backward=np.array(
            [e.cat == "fwdbwd" or e.cat == "forward_backward" for e in events], dtype=bool
        ),
    )
