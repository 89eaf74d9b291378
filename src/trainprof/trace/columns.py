"""Typed events to columns, chunk by chunk, with names and threads interned across chunks."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.errors import TraceError
from trainprof.trace import model
from trainprof.trace.decode import _Args, _Event
from trainprof.trace.event_values import DEVICE_KINDS as _DEVICE_KINDS
from trainprof.trace.event_values import HOST_OP_KINDS as _HOST_OP_KINDS
from trainprof.trace.event_values import MAX_DURATION_US
from trainprof.trace.event_values import canonical_id as _canonical_id
from trainprof.trace.event_values import device_id as _device_id
from trainprof.trace.event_values import int_or as _int_or
from trainprof.trace.model import Events, Flows, Kind, MemoryEvents
from trainprof.trace.piece_columns import add_scanned
from trainprof.trace.scan import ScannedPiece

_NO_ARGS = _Args()
#: The name shown for an event whose name is null or empty.
UNNAMED = "(unnamed)"
_EVENT_FIELDS = ("kind", "name", "ts", "dur", "tid", "device", "stream", "correlation",
                 "external_id", "blocks_per_sm", "occupancy", "nbytes", "flags", "flops", "shape",
                 "stack", "detail", "op_args")
_MEMORY_FIELDS = ("ts", "device_type", "device_id", "nbytes", "total_allocated",
                  "total_reserved", "addr", "tid")
_FLOW_FIELDS = ("id", "phase", "ts", "tid", "forward_backward")
#: The dtype of each column that is not the one its pieces have.
_EVENT_DTYPES = {"kind": np.uint8, "name": np.int32, "tid": np.int32, "flags": np.uint8,
                 "shape": np.int32, "stack": np.int32, "detail": np.int32, "op_args": np.int32}
_MEMORY_DTYPES = {"device_type": np.int8, "device_id": np.int16, "tid": np.int32}
_FLOW_DTYPES = {"id": np.int64, "phase": np.uint8, "tid": np.int32, "forward_backward": bool}


def _hashable(value: Any) -> Any:
    """A pid, tid, category, name or id usable as a dict key (a list or object becomes text)."""
    return value if value is None or isinstance(value, str | int | float) else repr(value)


def _hashable_pairs(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The pairs with lists and objects as text, so that they can be dict keys."""
    return [(_hashable(a), _hashable(b)) for a, b in pairs]


def _float_or_nan(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


class ColumnBuilder(msgspec.Struct):
    """Accumulates columns from chunks of typed events; ``finish`` sorts and joins them."""

    path: Path
    names: list[str] = field(default_factory=list)
    threads: dict[tuple[Any, Any], int] = field(default_factory=dict)
    t0: float | None = None
    #: Complete events whose negative ``dur`` was read as 0 (said in the trace's notes).
    negative_durations: int = 0
    _kinds: dict[tuple[Any, Any], tuple[int, int, int]] = field(default_factory=dict)
    _id_codes: dict[Any, int] = field(default_factory=dict)
    _raw_threads: dict[tuple[Any, Any], int] = field(default_factory=dict)
    _shapes: dict[bytes, int] = field(default_factory=dict)
    _stacks: dict[bytes, int] = field(default_factory=dict)
    _op_args: dict[bytes, int] = field(default_factory=dict)
    details: list[dict[str, Any]] = field(default_factory=list)
    _events: list[dict[str, np.ndarray]] = field(default_factory=list)
    _memory: list[dict[str, np.ndarray]] = field(default_factory=list)
    _flows: list[dict[str, np.ndarray]] = field(default_factory=list)

    def add(self, events: list[_Event] | ScannedPiece) -> None:
        """One piece's events: typed events, or the columns the compiled scanner read."""
        if isinstance(events, ScannedPiece):
            add_scanned(self, events)
            return
        complete = [e for e in events if e.ph == "X"]
        memory = [e for e in events if e.name == "[memory]" and e.ph in ("i", "I")]
        flows = [e for e in events if e.ph in ("s", "f", "t")]
        if self.t0 is None and (complete or memory or flows):
            self.t0 = self._first_ts([e.ts for e in complete or memory or flows])
        if complete:
            self._events.append(self._complete(complete))
        if memory:
            self._memory.append(self._memory_columns(memory))
        if flows:
            self._flows.append(self._flow_columns(flows))

    def add_all(self, chunks: Iterable[list[_Event] | ScannedPiece]) -> ColumnBuilder:
        for chunk in chunks:
            self.add(chunk)
            del chunk
        return self

    def finish(self) -> tuple[Events, MemoryEvents, Flows, list, float]:
        if not self._events and not self._memory:
            raise TraceError(f"{self.path} holds no trace events (the profiler recorded nothing).")
        # The times first: the origin is settled and the order taken on them; then each other
        # column is joined and put in that order in turn (its joined copy freed before the
        # next is made: less fresh memory than joining them all first).
        ev = {"ts": _joined_column(self._events, "ts", _EVENT_DTYPES)}
        mem = {"ts": _joined_column(self._memory, "ts", _MEMORY_DTYPES)}
        flows = _joined(self._flows, _FLOW_FIELDS, _FLOW_DTYPES)
        self._settle_origin(ev, mem, flows)
        events = Events(
            **_sorted_by_ts(self._events, ev["ts"], _EVENT_FIELDS, _EVENT_DTYPES),
            names=self.names,
            shapes=[b.decode("utf-8", "replace") for b in self._shapes],
            op_arg_texts=[b.decode("utf-8", "replace") for b in self._op_args],
            stacks=[_json_string(b) for b in self._stacks],
            details=self.details,
        )
        return (
            events,
            MemoryEvents(**_sorted_by_ts(self._memory, mem["ts"], _MEMORY_FIELDS,
                                          _MEMORY_DTYPES)),
            Flows(**flows),
            list(self.threads),
            self.t0 or 0.0,
        )

    def _settle_origin(self, *columns: dict[str, np.ndarray]) -> None:
        """The time origin is the floor of the earliest complete event's ts (else memory
        event's, else flow's) of the whole file, whichever piece it came in: the first piece's
        earliest, taken while reading, is moved there, so that a trace read in pieces (or in
        parallel) and read whole have the same origin and the same times from it."""
        ref = next((c["ts"] for c in columns if len(c["ts"])), None)
        if ref is None:
            return
        shift = math.floor(float(ref.min()))
        if shift:
            for c in columns:
                c["ts"] = c["ts"] - shift
            self.t0 = (self.t0 or 0.0) + shift

    # -- one chunk -------------------------------------------------------------------------

    def _first_ts(self, times: Sequence[float | None] | np.ndarray) -> float:
        """The time origin of the first events read: the floor of their earliest ``ts``."""
        try:
            # A None ts raises the TypeError below (no check per event on this path).
            return float(math.floor(min(times)))
        except TypeError:
            raise TraceError(f"{self.path} has events without a numeric 'ts' timestamp.") from None
        except (OverflowError, ValueError):
            raise TraceError(f"{self.path} has a timestamp that is not a finite number.") from None

    def _numbers(self, values: list[Any], what: str) -> np.ndarray:
        """float64 column from Python numbers (None -> nan); bad times are a TraceError."""
        try:
            out = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            out = np.array([_float_or_nan(v) for v in values], dtype=np.float64)
        if what in ("ts", "dur") and not np.isfinite(out).all():
            if what == "ts" and any(not isinstance(v, int | float) for v in values):
                raise TraceError(f"{self.path} has events without a numeric 'ts' timestamp.")
            raise TraceError(f"{self.path} has an event whose '{what}' is not a finite number.")
        return out

    def _ids(self, values: list[Any]) -> np.ndarray:
        """int64 ids (-1 when absent); ids beyond 62 bits, or not integers, get distinct codes
        from 2**62 up, so that equal ids stay equal and joins still work. (numpy alone would
        cut a float id 1.5 to 1 and make a list of ids a second axis.)"""
        if all(type(v) is int for v in values):
            with contextlib.suppress(OverflowError):
                return np.array(values, dtype=np.int64)
        codes = self._id_codes
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            if type(v) is int and -1 <= v < 2**62:
                out[i] = v
            else:
                out[i] = codes.setdefault(_hashable(v), 2**62 + len(codes))
        return out

    def _thread_ids(self, events: list[_Event]) -> np.ndarray:
        """Index of each event's thread; "25738" and 25738 are one thread (old traces write
        the tid of complete events as a string and of memory events as a number)."""
        keys = [(e.pid, e.tid) for e in events]
        try:
            unique = dict.fromkeys(keys)
        except TypeError:  # a list or an object as pid or tid (rare): read as text
            keys = _hashable_pairs(keys)
            unique = dict.fromkeys(keys)
        raw, threads = self._raw_threads, self.threads
        for key in unique:
            if key not in raw:
                canonical = (_canonical_id(key[0]), _canonical_id(key[1]))
                raw[key] = threads.setdefault(canonical, len(threads))
        return np.array([raw[k] for k in keys], dtype=np.int32)

    def _describe(self, key: tuple[Any, Any]) -> tuple[int, int, int]:
        cat, name = (k if isinstance(k, str) else "" if k is None else str(k) for k in key)
        name = name or UNNAMED
        kind = model.classify(cat, name)
        self._kinds[key] = hit = (int(kind), len(self.names), model.name_flags(kind, name))
        self.names.append(name)
        return hit

    def _complete(self, events: list[_Event]) -> dict[str, np.ndarray]:
        n = len(events)
        kinds = self._kinds
        keys = [(e.cat, e.name) for e in events]
        try:
            hits = [kinds.get(k) or self._describe(k) for k in keys]
        except TypeError:  # a list or an object as category or name (rare): read as text
            hits = [kinds.get(k) or self._describe(k) for k in _hashable_pairs(keys)]
        kind = np.array([h[0] for h in hits], dtype=np.uint8)
        dur = self._numbers([e.dur for e in events], "dur")
        if len(dur) and dur.max() > MAX_DURATION_US:  # sums of such numbers overflow to inf
            raise TraceError(f"{self.path} has an event lasting {dur.max():.3g} µs (over "
                             f"{MAX_DURATION_US / 86_400e6:.0f} days): not a recorded duration.")
        negative = int(np.count_nonzero(dur < 0))
        if negative:  # a recording glitch, not time: read as 0 and said once
            self.negative_durations += negative
            dur = np.maximum(dur, 0.0)
        cols = {
            "kind": kind,
            "name": np.array([h[1] for h in hits], dtype=np.int32),
            "flags": np.array([h[2] for h in hits], dtype=np.uint8),
            "ts": self._numbers([e.ts for e in events], "ts") - self.t0,
            "dur": dur,
            "tid": self._thread_ids(events),
        }
        del hits
        args = [e.args for e in events]
        cols["correlation"] = self._ids(
            [-1 if a is None or a.correlation is None else a.correlation for a in args]
        )
        cols["external_id"] = self._ids([
            -1 if a is None else a.external_id if a.external_id is not None
            else -1 if a.external_id_old is None else a.external_id_old
            for a in args
        ])
        cols.update(self._device_fields(events, args, kind, n))
        cols.update(self._op_fields(args, n, kind, cols["flags"]))
        return cols

    def _op_fields(self, args: list[_Args | None], n: int, kind: np.ndarray,
                   flags: np.ndarray) -> dict[str, np.ndarray]:
        """Shapes, stacks and FLOPs of host ops; launch and collective details."""
        shape = np.full(n, -1, dtype=np.int32)
        stack = np.full(n, -1, dtype=np.int32)
        detail = np.full(n, -1, dtype=np.int32)
        flops = np.full(n, np.nan)
        op_args = np.full(n, -1, dtype=np.int32)
        # Shapes, stacks and FLOPs belong to host ops only.
        ops = [i for i in np.flatnonzero(np.isin(kind, _HOST_OP_KINDS)).tolist()
               if args[i] is not None]
        if ops:
            shape[ops] = _interned(self._shapes, [args[i].input_dims for i in ops])
            stack[ops] = _interned(self._stacks, [args[i].call_stack for i in ops])
            # Types and scalar values only matter with shapes (the roofline's models).
            shaped = np.asarray(ops)[shape[ops] >= 0].tolist()
            op_args[shaped] = _interned(self._op_args,
                                        [_types_and_values(args[i]) for i in shaped])
            flops[ops] = self._numbers([args[i].flops for i in ops], "args")
        # Details only where they exist: kernels and communication.
        is_kernel = kind == Kind.KERNEL
        wanted = np.flatnonzero(is_kernel | ((flags & model.FLAG_COMM) != 0)).tolist()
        kernel_flags = is_kernel[wanted].tolist()
        for i, on_device in zip(wanted, kernel_flags, strict=True):
            a = args[i]
            if a is None:
                continue
            d = a.kernel_detail() if on_device else a.detail()
            if d is not None:
                detail[i] = len(self.details)
                self.details.append(d)
        return {"shape": shape, "stack": stack, "detail": detail, "flops": flops,
                "op_args": op_args}

    def _device_fields(self, events: list[_Event], args: list[Any], kind: np.ndarray, n: int
                       ) -> dict[str, np.ndarray]:
        """Device-side fields, read only for the (few) kernels, copies and memsets."""
        idx = np.flatnonzero(np.isin(kind, _DEVICE_KINDS))
        out: dict[str, np.ndarray] = {
            "device": np.full(n, -1, dtype=np.int16),
            "stream": np.full(n, -1, dtype=np.int64),
            "blocks_per_sm": np.full(n, np.nan, dtype=np.float32),
            "occupancy": np.full(n, np.nan, dtype=np.float32),
            "nbytes": np.full(n, np.nan, dtype=np.float64),
        }
        if not len(idx):
            return out
        dev_events = [events[i] for i in idx]
        dev_args = [args[i] or _NO_ARGS for i in idx]
        pairs = list(zip(dev_events, dev_args, strict=True))
        out["device"][idx] = [_device_id(e.pid if a.device is None else a.device)
                              for e, a in pairs]
        out["stream"][idx] = [_int_or(e.tid if a.stream is None else a.stream, -1) for e, a in pairs]
        out["blocks_per_sm"][idx] = self._numbers([a.blocks_per_sm for a in dev_args], "args")
        out["occupancy"][idx] = self._numbers([a.occupancy for a in dev_args], "args")
        out["nbytes"][idx] = self._numbers([a.bytes for a in dev_args], "args")
        return out

    def _memory_columns(self, events: list[_Event]) -> dict[str, np.ndarray]:
        args = [e.args or _NO_ARGS for e in events]
        num = self._numbers
        return {
            "ts": num([e.ts for e in events], "ts") - self.t0,
            "device_type": np.nan_to_num(num([a.device_type for a in args], "args"), nan=-1),
            "device_id": np.nan_to_num(num([a.device_id for a in args], "args"), nan=-1),
            "nbytes": num([a.mem_bytes for a in args], "args"),
            "total_allocated": num([a.total_allocated for a in args], "args"),
            "total_reserved": num([a.total_reserved for a in args], "args"),
            "addr": num([a.addr for a in args], "args"),
            "tid": self._thread_ids(events),
        }

    def _flow_columns(self, events: list[_Event]) -> dict[str, np.ndarray]:
        return {
            "id": self._ids([-1 if e.id is None else e.id for e in events]),
            "phase": np.array([e.ph != "s" for e in events], dtype=np.uint8),
            "ts": self._numbers([_float_or_nan(e.ts) for e in events], "args") - self.t0,
            "tid": self._thread_ids(events),
            "forward_backward": np.array(
                [e.cat == "fwdbwd" or e.cat == "forward_backward" for e in events], dtype=bool
            ),
        }


def _interned(table: dict[bytes, int], raws: list[Any]) -> list[int]:
    """Index of each raw value in ``table`` (added when new); -1 for an absent value."""
    keys = [bytes(raw) if len(raw) else None for raw in raws]
    for key in dict.fromkeys(keys):
        if key is not None and key not in table:
            table[key] = len(table)
    return [-1 if k is None else table[k] for k in keys]


def _types_and_values(a: _Args) -> bytes:
    """``[Input type, Concrete Inputs]`` as JSON text (empty when the op recorded neither)."""
    types, values = bytes(a.input_types), bytes(a.concrete)
    if not types and not values:
        return b""
    return b"[" + (types or b"null") + b"," + (values or b"null") + b"]"


def _json_string(raw: bytes) -> str:
    """A JSON string value as text (call stacks are strings in the trace)."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _joined(parts: list[dict[str, np.ndarray]], fields: tuple[str, ...],
            dtypes: dict[str, Any]) -> dict[str, np.ndarray]:
    return {f: _joined_column(parts, f, dtypes) for f in fields}


def _joined_column(parts: list[dict[str, np.ndarray]], field: str, dtypes: dict[str, Any]
                   ) -> np.ndarray:
    """Column ``field`` of the pieces ``parts``, one after the other, in its dtype."""
    if not parts:
        return np.empty(0, dtype=dtypes.get(field, np.float64))
    dtype = dtypes.get(field, parts[0][field].dtype)
    if len(parts) == 1:
        return parts[0][field].astype(dtype, copy=False)
    return np.concatenate([p[field] for p in parts]).astype(dtype, copy=False)


def _sorted_by_ts(parts: list[dict[str, np.ndarray]], ts: np.ndarray, fields: tuple[str, ...],
                  dtypes: dict[str, Any]) -> dict[str, np.ndarray]:
    """The columns of ``parts`` joined (``ts`` those times, joined already), in the (stable)
    order of ``ts``."""
    order = np.argsort(ts, kind="stable")
    in_order = not len(ts) or bool(np.all(order[1:] > order[:-1]))
    out = {}
    for f in fields:
        column = ts if f == "ts" else _joined_column(parts, f, dtypes)
        out[f] = column if in_order or _constant(column) else column[order]
    return out


def _constant(column: np.ndarray) -> bool:
    """Whether every value of ``column`` has the same bits (then every order of it is itself:
    a column no event fills, such as FLOPs in a trace without them, is not reordered)."""
    if len(column) < 2:
        return True
    bits = column.view(f"u{column.dtype.itemsize}")
    if (bits[::max(1, len(bits) // 16)] != bits[0]).any():  # most columns: a sample says no
        return False
    return bool((bits == bits[0]).all())
