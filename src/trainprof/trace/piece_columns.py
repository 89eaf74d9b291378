"""``ColumnBuilder.add`` for a piece the compiled scanner read (trace/scan.py), with numpy.

The result is exactly what ``ColumnBuilder.add`` gives for the same events decoded by msgspec:
the same columns, and the builder's tables (names, threads, shapes, stacks, details...) grown
in the same order. Each unique value text of the piece is decoded once and the per-value rules
of trace/columns.py (``_device_id``, ``_int_or``, ``model.classify``...) run once per unique
value, into lookup tables that the events index (a code -1, an absent value, reads the last
slot); the events only meet numpy. A piece with something the fast path does not model (a
missing time, a list as a name, a duration ``add`` refuses...) is decoded by msgspec and given
to ``add``, which says or repairs what it says or repairs today.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from trainprof.trace import model
from trainprof.trace import scan as sc
from trainprof.trace.decode import _DETAIL_FIELDS
from trainprof.trace.event_values import (
    DEVICE_KINDS,
    HOST_OP_KINDS,
    MAX_DURATION_US,
    canonical_id,
    device_id,
    int_or,
)
from trainprof.trace.model import Kind

if TYPE_CHECKING:
    from trainprof.trace.columns import ColumnBuilder

# An event's phase, as ``add`` sorts events: complete, instant (memory when so named), flows.
_OTHER, _COMPLETE, _INSTANT, _FLOW_START, _FLOW_STEP = range(5)
_PHASES = {"X": _COMPLETE, "i": _INSTANT, "I": _INSTANT, "s": _FLOW_START, "f": _FLOW_STEP,
           "t": _FLOW_STEP}
#: Per kind (an index), whether it is a device kind; a host op kind.
_IS_DEVICE = np.isin(np.arange(256), DEVICE_KINDS)
_IS_HOST_OP = np.isin(np.arange(256), HOST_OP_KINDS)
#: A rule's result that no rule gives: "the value is null or absent, read the other column".
_UNSET = np.iinfo(np.int64).min


def _phase(value: Any) -> int:
    return _PHASES.get(value, _OTHER) if isinstance(value, str) else _OTHER


class _Piece:
    """A scanned piece with its unique values decoded, looked up per column."""

    def __init__(self, piece: sc.ScannedPiece) -> None:
        self.p = piece
        self.values = piece.values()
        self.absent = len(self.values)  # the table slot of an absent value (code -1)

    def table(self, codes: np.ndarray, rule: Callable[[Any], Any], default: Any,
              dtype: Any = bool) -> np.ndarray:
        """A lookup table by value code: ``rule`` of each value that ``codes`` hold (of
        ``default`` for the absent value, in the last slot, which the code -1 reads)."""
        present = (np.flatnonzero(np.bincount(codes + 1, minlength=1)) - 1).tolist()
        out = np.zeros(self.absent + 1, dtype=dtype)
        out[present] = [rule(self.value(i, default)) for i in present]
        return out

    def mapped(self, codes: np.ndarray, rule: Callable[[Any], Any], default: Any,
               dtype: Any = bool) -> np.ndarray:
        """``rule`` of each event's value (``codes``; -1: absent, read as ``default``),
        computed once per distinct value."""
        return self.table(codes, rule, default, dtype)[codes]

    def value(self, code: int, default: Any) -> Any:
        """The value of ``code`` (``default`` for -1, absent)."""
        return default if code < 0 else self.values[code]


class _Rows:
    """Some events of a piece (``rows``): their number, id and tuple columns (views when
    they are all the piece's events)."""

    def __init__(self, piece: sc.ScannedPiece, rows: np.ndarray) -> None:
        self.rows = rows
        every = len(rows) == len(piece)
        self.numbers = piece.numbers if every else piece.numbers[rows]
        self.ids = piece.ids if every else piece.ids[rows]
        self.tuples = piece.tuples if every else piece.tuples[rows]
        self.has_args = piece.has_args if every else piece.has_args[rows]

    def __len__(self) -> int:
        return len(self.rows)


def add_scanned(builder: ColumnBuilder, piece: sc.ScannedPiece) -> None:
    """``builder.add`` for the scanned piece."""
    p = _Piece(piece)
    phase = p.mapped(piece.spans[:, sc.PH], _phase, "", np.uint8)
    complete = np.flatnonzero(phase == _COMPLETE)
    memory = np.flatnonzero(phase == _INSTANT)
    if len(memory):
        memory = memory[p.mapped(piece.spans[memory, sc.NAME], lambda v: v == "[memory]", "")]
    flows = np.flatnonzero(phase >= _FLOW_START)
    events = _Rows(piece, complete)
    if not _modelled(builder, p, events, memory, flows):
        sc.SCAN_STATS["redecoded"] += 1
        builder.add(piece.events())
        return
    if builder.t0 is None and (len(complete) or len(memory) or len(flows)):
        first = complete if len(complete) else memory if len(memory) else flows
        builder.t0 = builder._first_ts(piece.numbers[first, sc.TS])
    if len(complete):
        builder._events.append(_complete(builder, p, events))
    if len(memory):
        builder._memory.append(_memory_columns(builder, p, memory))
    if len(flows):
        builder._flows.append(_flow_columns(builder, p, flows, phase[flows]))


def _modelled(builder: ColumnBuilder, p: _Piece, events: _Rows, memory: np.ndarray,
              flows: np.ndarray) -> bool:
    """Whether ``add`` would read these events without an error, a repair or a rare branch
    (unhashable categories, names or threads), the cases left to it."""
    nums = p.p.numbers
    if np.isnan(events.numbers[:, sc.TS]).any() or np.isnan(nums[memory, sc.TS]).any():
        return False  # a missing time: add() raises
    if (builder.t0 is None and not len(events) and not len(memory)
            and np.isnan(nums[flows, sc.TS]).any()):
        return False  # the time origin taken from flows without a time: add() raises
    if not (events.numbers[:, sc.DUR] <= MAX_DURATION_US).all():
        return False  # a null duration, or one add() refuses
    return _hashable(p) or _hashable_rows(p, np.concatenate([events.rows, memory, flows]))


def _hashable(p: _Piece) -> bool:
    """Whether no event of the piece has a list or an object as category, name, pid or tid
    (the piece's tables of (cat, name) and (pid, tid) pairs hold every event's)."""
    codes = np.concatenate([p.p.cat_names.reshape(-1), p.p.threads.reshape(-1)])
    values = p.values
    return not any(isinstance(values[c], list | dict)
                   for c in np.unique(codes).tolist() if c >= 0)


def _hashable_rows(p: _Piece, rows: np.ndarray) -> bool:
    """Whether none of the events ``rows`` has a list or an object as category, name, pid or
    tid."""
    for column in (sc.CAT, sc.NAME, sc.PID, sc.TID):
        codes = p.p.spans[rows, column]
        present = np.flatnonzero(np.bincount(codes + 1, minlength=1)) - 1
        if any(isinstance(p.value(c, None), list | dict) for c in present.tolist()):
            return False
    return True


def _first_seen(codes: np.ndarray, count: int) -> list[int]:
    """The distinct ``codes`` (each in 0..count-1) in order of first occurrence."""
    first = np.full(count, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    present = np.flatnonzero(first < len(codes))
    return present[np.argsort(first[present], kind="stable")].tolist()


def _looked_up(codes: np.ndarray, keys: list[Any], known: dict[Any, Any],
               make: Callable[[Any], Any]) -> list[Any]:
    """Per key (``codes`` index ``keys``), ``known[key]``; a key ``codes`` hold that is not
    known yet is ``make(key)``, made in order of first occurrence (as ``add`` makes them)."""
    try:
        found = [known.get(k) for k in keys]
    except TypeError:  # an unhashable key of some event not read here (a metadata event)
        found = [None] * len(keys)
    if None in found:
        for k in _first_seen(codes, len(keys)):
            hit = known.get(keys[k])
            found[k] = make(keys[k]) if hit is None else hit
    return found


def _thread_ids(builder: ColumnBuilder, p: _Piece, codes: np.ndarray) -> np.ndarray:
    """``ColumnBuilder._thread_ids`` for events whose THREAD tuple codes are ``codes``."""
    raw, threads = builder._raw_threads, builder.threads

    def new(key: tuple[Any, Any]) -> int:
        canonical = (canonical_id(key[0]), canonical_id(key[1]))
        raw[key] = out = threads.setdefault(canonical, len(threads))
        return out

    keys = [(p.value(pid, 0), p.value(tid, 0)) for pid, tid in p.p.threads.tolist()]
    found = _looked_up(codes, keys, raw, new)
    return np.array([-1 if f is None else f for f in found], dtype=np.int32)[codes]


def _ids(values: np.ndarray) -> np.ndarray:
    return np.where(values == sc.NO_ID, -1, values)


def _complete(builder: ColumnBuilder, p: _Piece, events: _Rows) -> dict[str, np.ndarray]:
    """``ColumnBuilder._complete`` for the ``events``."""
    codes = events.tuples[:, sc.CAT_NAME]
    keys = [(p.value(cat, ""), p.value(name, "")) for cat, name in p.p.cat_names.tolist()]
    hits = np.array([h or (0, -1, 0) for h in
                     _looked_up(codes, keys, builder._kinds, builder._describe)], dtype=np.int64)
    kinds = hits[:, 0].astype(np.uint8)
    kind = kinds[codes]
    flags_of = hits[:, 2].astype(np.uint8)
    flags = flags_of[codes]
    nums, ids = events.numbers, events.ids
    dur = nums[:, sc.DUR]
    negative = int(np.count_nonzero(dur < 0))
    if negative:
        builder.negative_durations += negative
        dur = np.maximum(dur, 0.0)
    cols = {
        "kind": kind,
        "name": hits[:, 1].astype(np.int32)[codes],
        "flags": flags,
        "ts": nums[:, sc.TS] - builder.t0,
        "dur": np.ascontiguousarray(dur),
        "tid": _thread_ids(builder, p, events.tuples[:, sc.THREAD]),
        "correlation": _ids(ids[:, sc.CORRELATION]),
        "external_id": np.where(ids[:, sc.EXTERNAL_ID] != sc.NO_ID, ids[:, sc.EXTERNAL_ID],
                                _ids(ids[:, sc.EXTERNAL_ID_OLD])),
    }
    cols.update(_device_fields(p, events, _IS_DEVICE[kinds][codes]))
    is_kernel = kinds == Kind.KERNEL
    cols.update(_op_fields(builder, p, events, _IS_HOST_OP[kinds][codes],
                           (is_kernel | ((flags_of & model.FLAG_COMM) != 0))[codes],
                           is_kernel[codes]))
    return cols


def _device_fields(p: _Piece, events: _Rows, on_device: np.ndarray) -> dict[str, np.ndarray]:
    """``ColumnBuilder._device_fields``: the device from args.device (else pid), the stream
    from args.stream (else tid), for kernels, copies and memsets (``on_device``)."""
    n = len(events)
    out: dict[str, np.ndarray] = {
        "device": np.full(n, -1, dtype=np.int16),
        "stream": np.full(n, -1, dtype=np.int64),
        "blocks_per_sm": np.full(n, np.nan, dtype=np.float32),
        "occupancy": np.full(n, np.nan, dtype=np.float32),
        "nbytes": np.full(n, np.nan, dtype=np.float64),
    }
    idx = np.flatnonzero(on_device)
    if not len(idx):
        return out
    spans = p.p.spans[events.rows[idx]]
    out["device"][idx] = _either(p, spans, sc.DEVICE, sc.PID, device_id)
    out["stream"][idx] = _either(p, spans, sc.STREAM, sc.TID, lambda v: int_or(v, -1))
    nums = events.numbers[idx]
    out["blocks_per_sm"][idx] = nums[:, sc.BLOCKS_PER_SM]
    out["occupancy"][idx] = nums[:, sc.OCCUPANCY]
    out["nbytes"][idx] = nums[:, sc.BYTES]
    return out


def _either(p: _Piece, spans: np.ndarray, column: int, instead: int,
            rule: Callable[[Any], int]) -> np.ndarray:
    """``rule`` of the args value in ``column``, or of the event's ``instead`` value (default
    0) when that one is null or absent."""
    own = p.mapped(spans[:, column], lambda v: _UNSET if v is None else rule(v), None,
                   np.int64)
    other = p.mapped(spans[:, instead], rule, 0, np.int64)
    return np.where(own == _UNSET, other, own)


def _interned(table: dict[bytes, int], keys: np.ndarray, count: int,
              text: Callable[[int], bytes]) -> np.ndarray:
    """``columns._interned``: each key's index in ``table`` (the new ``text(key)`` added in
    order of first occurrence); -1 for the key -1 (absent). Keys are 0..count-1."""
    out = np.full(len(keys), -1, dtype=np.int32)
    present = np.flatnonzero(keys >= 0)
    if not len(present):
        return out
    codes = np.empty(count, dtype=np.int32)
    for k in _first_seen(keys[present], count):
        codes[k] = table.setdefault(text(k), len(table))
    out[present] = codes[keys[present]]
    return out


def _op_fields(builder: ColumnBuilder, p: _Piece, events: _Rows, host_op: np.ndarray,
               wants_detail: np.ndarray, is_kernel: np.ndarray) -> dict[str, np.ndarray]:
    """``ColumnBuilder._op_fields``: shapes, stacks, FLOPs of host ops (``host_op``); launch
    and collective details of kernels and communication (``wants_detail``)."""
    n = len(events)
    shape = np.full(n, -1, dtype=np.int32)
    stack = np.full(n, -1, dtype=np.int32)
    detail = np.full(n, -1, dtype=np.int32)
    flops = np.full(n, np.nan)
    op_args = np.full(n, -1, dtype=np.int32)
    has_args = events.has_args
    ops = np.flatnonzero(host_op & has_args)
    if len(ops):
        _host_op_fields(builder, p, events, ops, shape, stack, op_args)
        flops[ops] = events.numbers[ops, sc.FLOPS]
    wanted = np.flatnonzero(wants_detail & has_args)
    if len(wanted):
        _details(builder, p, events.tuples[wanted, sc.DETAIL], is_kernel[wanted], wanted,
                 detail)
    return {"shape": shape, "stack": stack, "detail": detail, "flops": flops,
            "op_args": op_args}


def _host_op_fields(builder: ColumnBuilder, p: _Piece, events: _Rows, ops: np.ndarray,
                    shape: np.ndarray, stack: np.ndarray, op_args: np.ndarray) -> None:
    """Shapes, stacks, and types with values, of the host ops ``ops``."""
    texts = p.p.texts
    spans = p.p.spans[events.rows[ops]]
    shape[ops] = _interned(builder._shapes, spans[:, sc.INPUT_DIMS], len(texts),
                           texts.__getitem__)
    stack[ops] = _interned(builder._stacks, spans[:, sc.CALL_STACK], len(texts),
                           texts.__getitem__)
    shaped = shape[ops] >= 0
    types, values = spans[shaped, sc.INPUT_TYPES], spans[shaped, sc.CONCRETE]
    # (types, values) numbered densely; neither: no text (columns._types_and_values)
    pairs, both = np.unique(np.where(types < 0, p.absent, types).astype(np.int64)
                            * (p.absent + 1) + np.where(values < 0, p.absent, values),
                            return_inverse=True)
    both = both.reshape(-1)
    both[(types < 0) & (values < 0)] = -1

    def joined(k: int) -> bytes:
        t, v = divmod(int(pairs[k]), p.absent + 1)
        return (b"[" + (b"null" if t == p.absent else texts[t]) + b"," +
                (b"null" if v == p.absent else texts[v]) + b"]")

    op_args[ops[shaped]] = _interned(builder._op_args, both, len(pairs), joined)


def _details(builder: ColumnBuilder, p: _Piece, codes: np.ndarray, on_device: np.ndarray,
             at: np.ndarray, detail: np.ndarray) -> None:
    """``_Args.kernel_detail`` (kernels) or ``_Args.detail`` of each event (its DETAIL tuple
    code in ``codes``), appended to the builder's details and indexed in ``detail``. Events
    with equal details share one dict (which nothing changes)."""
    has_some = codes >= 0  # an event without any of these fields has no detail
    at = at[has_some]
    keys = codes[has_some].astype(np.int64) * 2 + on_device[has_some]
    count = 2 * len(p.p.details)
    present = np.flatnonzero(np.bincount(keys, minlength=count))
    made = _made_details(p, p.p.details[present // 2].tolist(), (present % 2).tolist())
    table = np.empty(count, dtype=object)
    table[present] = made
    exists = np.zeros(count, dtype=bool)
    exists[present] = [d is not None for d in made]
    has = np.flatnonzero(exists[keys])
    if not len(has):
        return
    start = len(builder.details)
    detail[at[has]] = np.arange(start, start + len(has), dtype=np.int32)
    builder.details.extend(table[keys[has]].tolist())


_GRID, _BLOCK, _REGISTERS, _SHARED_MEMORY, _COLLECTIVE = range(5)


def _made_details(p: _Piece, rows: list[list[int]], on_device: list[int]
                  ) -> list[dict[str, Any] | None]:
    """``_Args.kernel_detail`` (``on_device``) or ``_Args.detail`` of each row of span codes
    of ``decode._DETAIL_FIELDS``."""
    values = [*p.values, None]  # the code -1 (absent) reads None
    out: list[dict[str, Any] | None] = []
    for codes, kernel in zip(rows, on_device, strict=True):
        if kernel and values[codes[_COLLECTIVE]] is None:
            grid, block = values[codes[_GRID]], values[codes[_BLOCK]]
            out.append(None if grid is None and block is None else {
                "grid": grid, "block": block, "registers": values[codes[_REGISTERS]],
                "shared_memory": values[codes[_SHARED_MEMORY]]})
            continue
        fields = {k: v for k, c in zip(_DETAIL_FIELDS, codes, strict=True)
                  if (v := values[c]) is not None}
        out.append(fields or None)
    return out


def _memory_columns(builder: ColumnBuilder, p: _Piece, rows: np.ndarray
                    ) -> dict[str, np.ndarray]:
    """``ColumnBuilder._memory_columns``."""
    nums = p.p.numbers[rows]
    return {
        "ts": nums[:, sc.TS] - builder.t0,
        "device_type": np.nan_to_num(nums[:, sc.DEVICE_TYPE], nan=-1),
        "device_id": np.nan_to_num(nums[:, sc.DEVICE_ID], nan=-1),
        "nbytes": nums[:, sc.MEM_BYTES].copy(),
        "total_allocated": nums[:, sc.TOTAL_ALLOCATED].copy(),
        "total_reserved": nums[:, sc.TOTAL_RESERVED].copy(),
        "addr": nums[:, sc.ADDR].copy(),
        "tid": _thread_ids(builder, p, p.p.tuples[rows, sc.THREAD]),
    }


def _flow_columns(builder: ColumnBuilder, p: _Piece, rows: np.ndarray, phase: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """``ColumnBuilder._flow_columns``."""
    return {
        "id": _ids(p.p.ids[rows, sc.ID]),
        "phase": (phase == _FLOW_STEP).view(np.uint8),
        "ts": p.p.numbers[rows, sc.TS] - builder.t0,
        "tid": _thread_ids(builder, p, p.p.tuples[rows, sc.THREAD]),
        "forward_backward": p.mapped(p.p.spans[rows, sc.CAT],
                                     lambda v: v == "fwdbwd" or v == "forward_backward", ""),
    }
