"""Kineto JSON to columns: a typed msgspec decode that keeps only the fields analysis needs.

The schema names the few ``args`` keys we read; msgspec skips every other key without building
Python objects for it, which is where the speed comes from. Values are typed ``Any`` where real
traces disagree on the type (ids as numbers or strings, ``tid`` as ``"stream 7"`` or ``7``).
"""

from __future__ import annotations

import gzip
import math
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
    if not data.strip():
        raise TraceError(f"{path} is empty.")
    return data


def decode(path: Path, data: bytes) -> tuple[list[_Event], dict[str, Any]]:
    """Parse the JSON into typed events and the top-level metadata we keep."""
    head = data.lstrip()[:1]
    try:
        if head == b"[":
            return _LIST_DECODER.decode(data), {}
        if head != b"{":
            raise TraceError(f"{path} is not JSON (it starts with {data.lstrip()[:12]!r}).")
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
    x_events: list[_Event] = []
    mem_events: list[_Event] = []
    flow_events: list[_Event] = []
    for e in events:
        ph = e.ph
        if ph == "X":
            x_events.append(e)
        elif ph == "i" or ph == "I":
            if e.name == "[memory]":
                mem_events.append(e)
        elif ph == "s" or ph == "f" or ph == "t":
            flow_events.append(e)
    if not x_events and not mem_events:
        raise TraceError(f"{path} holds no trace events (the profiler recorded nothing).")

    threads: dict[tuple[Any, Any], int] = {}
    try:
        t0 = math.floor(min(e.ts for e in x_events)) if x_events else math.floor(mem_events[0].ts)
    except TypeError:
        raise TraceError(f"{path} has events without a numeric 'ts' timestamp.") from None
    except (OverflowError, ValueError):
        raise TraceError(f"{path} has a timestamp that is not a finite number.") from None
    return (
        _complete_columns(path, x_events, threads, t0),
        _memory_columns(mem_events, t0),
        _flow_columns(flow_events, threads, t0),
        list(threads),
        float(t0),
    )


def _complete_columns(path: Path, events: list[_Event], threads: dict, t0: float) -> Events:
    n = len(events)
    names: list[str] = []
    by_key: dict[tuple[str, str], tuple[int, int, int]] = {}
    kind = np.empty(n, dtype=np.uint8)
    name = np.empty(n, dtype=np.int32)
    flags = np.empty(n, dtype=np.uint8)
    tid = np.empty(n, dtype=np.int32)
    ts = [0.0] * n
    dur = [0.0] * n
    device = [-1] * n
    stream = [-1] * n
    corr: list[Any] = [-1] * n
    ext: list[Any] = [-1] * n
    bps = [math.nan] * n
    occ = [math.nan] * n
    nbytes = [math.nan] * n
    device_kinds = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
    for i, e in enumerate(events):
        cat, nm = e.cat, e.name
        key = (cat, nm)
        hit = by_key.get(key)
        if hit is None:
            if not isinstance(cat, str) or not isinstance(nm, str):
                cat, nm = str(cat), str(nm)
            k = model.classify(cat, nm)
            hit = by_key[key] = (int(k), len(names), model.name_flags(k, nm))
            names.append(nm)
        k, name[i], flags[i] = hit
        kind[i] = k
        thread = (e.pid, e.tid)
        t = threads.get(thread)
        if t is None:
            t = threads[thread] = len(threads)
        tid[i] = t
        ts[i] = e.ts
        d = e.dur
        dur[i] = d if d is not None else 0.0
        a = e.args
        if a is not None:
            c = a.correlation
            if c is not None:
                corr[i] = c
            x = a.external_id if a.external_id is not None else a.external_id_old
            if x is not None:
                ext[i] = x
            if k in device_kinds:
                device[i] = _int_or(a.device if a.device is not None else e.pid, -1)
                stream[i] = _int_or(a.stream if a.stream is not None else e.tid, -1)
                if a.blocks_per_sm is not None:
                    bps[i] = _float_or_nan(a.blocks_per_sm)
                if a.occupancy is not None:
                    occ[i] = _float_or_nan(a.occupancy)
                if a.bytes is not None:
                    nbytes[i] = _float_or_nan(a.bytes)
        elif k in device_kinds:
            device[i] = _int_or(e.pid, -1)
            stream[i] = _int_or(e.tid, -1)
    try:
        ts_arr = np.array(ts, dtype=np.float64) - t0
        dur_arr = np.array(dur, dtype=np.float64)
    except (TypeError, ValueError):
        raise TraceError(f"{path} has an event whose 'ts' or 'dur' is not a number.") from None
    if not (np.isfinite(ts_arr).all() and np.isfinite(dur_arr).all()):
        raise TraceError(f"{path} has a timestamp or duration that is not a finite number.")
    dur_arr = np.maximum(dur_arr, 0.0)  # a negative duration is a recording glitch, not time
    order = np.argsort(ts_arr, kind="stable")
    cols = Events(
        kind=kind,
        name=name,
        ts=ts_arr,
        dur=dur_arr,
        tid=tid,
        device=np.array(device, dtype=np.int16),
        stream=np.array(stream, dtype=np.int64),
        correlation=_id_column(corr),
        external_id=_id_column(ext),
        blocks_per_sm=np.array(bps, dtype=np.float32),
        occupancy=np.array(occ, dtype=np.float32),
        nbytes=np.array(nbytes, dtype=np.float64),
        flags=flags,
        names=names,
    )
    return _take(cols, order)


def _take(ev: Events, order: np.ndarray) -> Events:
    if len(order) and np.all(order[1:] > order[:-1]):
        return ev
    return Events(
        **{
            f: getattr(ev, f)[order]
            for f in (
                "kind name ts dur tid device stream correlation external_id blocks_per_sm "
                "occupancy nbytes flags"
            ).split()
        },
        names=ev.names,
    )


def _memory_columns(events: list[_Event], t0: float) -> MemoryEvents:
    n = len(events)
    cols = {k: [math.nan] * n for k in ("ts", "type", "id", "bytes", "alloc", "reserved", "addr")}
    for i, e in enumerate(events):
        cols["ts"][i] = _float_or_nan(e.ts)
        a = e.args
        if a is None:
            continue
        cols["type"][i] = _float_or_nan(a.device_type)
        cols["id"][i] = _float_or_nan(a.device_id)
        cols["bytes"][i] = _float_or_nan(a.mem_bytes)
        cols["alloc"][i] = _float_or_nan(a.total_allocated)
        cols["reserved"][i] = _float_or_nan(a.total_reserved)
        cols["addr"][i] = _float_or_nan(a.addr)
    ts = np.array(cols["ts"], dtype=np.float64) - t0
    order = np.argsort(ts, kind="stable")
    return MemoryEvents(
        ts=ts[order],
        device_type=np.nan_to_num(np.array(cols["type"])[order], nan=-1).astype(np.int8),
        device_id=np.nan_to_num(np.array(cols["id"])[order], nan=-1).astype(np.int16),
        nbytes=np.array(cols["bytes"], dtype=np.float64)[order],
        total_allocated=np.array(cols["alloc"], dtype=np.float64)[order],
        total_reserved=np.array(cols["reserved"], dtype=np.float64)[order],
        addr=np.array(cols["addr"], dtype=np.float64)[order],
    )


def _flow_columns(events: list[_Event], threads: dict, t0: float) -> Flows:
    n = len(events)
    ids: list[Any] = [-1] * n
    phase = np.empty(n, dtype=np.uint8)
    ts = [math.nan] * n
    tid = np.empty(n, dtype=np.int32)
    fwdbwd = np.empty(n, dtype=bool)
    for i, e in enumerate(events):
        ids[i] = e.id if e.id is not None else -1
        phase[i] = 0 if e.ph == "s" else 1
        ts[i] = _float_or_nan(e.ts)
        thread = (e.pid, e.tid)
        t = threads.get(thread)
        if t is None:
            t = threads[thread] = len(threads)
        tid[i] = t
        fwdbwd[i] = e.cat == "fwdbwd" or e.cat == "forward_backward"
    return Flows(
        id=_id_column(ids),
        phase=phase,
        ts=np.array(ts, dtype=np.float64) - t0,
        tid=tid,
        forward_backward=fwdbwd,
    )
