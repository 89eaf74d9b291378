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

import functools
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
# Bits of what else a complete event has, by its (cat, name) (``_complete``).
_DEVICE, _HOST_OP, _DETAILED, _KERNEL = 1, 2, 4, 8
_NONE = np.empty(0, dtype=np.intp)
#: A rule's result that no rule gives: "the value is null or absent, read the other column".
_UNSET = np.iinfo(np.int64).min


def _where(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero`` of a 1-d ``mask``, without its Python layers (called per piece)."""
    return mask.nonzero()[0]


def _filled(n: int, value: Any, dtype: Any = np.float64) -> np.ndarray:
    """``np.full``, without its Python layers (called per piece)."""
    out = np.empty(n, dtype=dtype)
    out.fill(value)
    return out


def _phase(value: Any) -> int:
    return _PHASES.get(value, _OTHER) if isinstance(value, str) else _OTHER


class _Piece:
    """A scanned piece with its unique values decoded, looked up per column."""

    def __init__(self, piece: sc.ScannedPiece) -> None:
        self.p = piece
        self.values = piece.values()

    def mapped(self, codes: np.ndarray, rule: Callable[[Any], Any], default: Any,
               dtype: Any = bool) -> np.ndarray:
        """``rule`` of each event's value (``codes``; -1: absent, read as ``default``),
        computed once per distinct value, into a table by code + 1 that the events index."""
        shifted = codes.astype(np.intp)
        shifted += 1
        present = _where(np.bincount(shifted)).tolist()
        table = np.zeros(len(self.values) + 1, dtype=dtype)
        values = [default, *self.values]
        table[present] = [rule(values[i]) for i in present]
        return table[shifted]

    def value(self, code: int, default: Any) -> Any:
        """The value of ``code`` (``default`` for -1, absent)."""
        return default if code < 0 else self.values[code]

    @functools.cached_property
    def thread_keys(self) -> list[tuple[Any, Any]]:
        """The (pid, tid) values of each THREAD tuple code (0 for an absent one)."""
        values = [*self.values, 0]  # the code -1 reads the default
        return [(values[pid], values[tid]) for pid, tid in self.p.threads.tolist()]


class _Rows:
    """Some events of a piece: ``rows`` of its columns (the columns themselves, views, when
    they are all the piece's events)."""

    def __init__(self, piece: sc.ScannedPiece, rows: np.ndarray) -> None:
        self.p = piece
        self.rows = rows
        self.every = len(rows) == len(piece)
        self._gathered: dict[tuple[int, int], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def of(self, matrix: np.ndarray, column: int, which: np.ndarray | None = None
           ) -> np.ndarray:
        """``column`` of one of the piece's matrices, for these events (or for those of
        them at positions ``which``)."""
        values = matrix[:, column]
        if which is not None:
            return values[self.at(which)]
        if self.every:
            return values
        key = (id(matrix), column)
        if key not in self._gathered:
            self._gathered[key] = values[self.rows]
        return self._gathered[key]

    def at(self, which: np.ndarray) -> np.ndarray:
        """The piece's rows of the events at positions ``which``."""
        return which if self.every else self.rows[which]


def add_scanned(builder: ColumnBuilder, piece: sc.ScannedPiece) -> None:
    """``builder.add`` for the scanned piece."""
    p = _Piece(piece)
    complete, memory, flows, flow_phase = _split(p)
    if len(memory):
        memory = memory[p.mapped(piece.spans[memory, sc.NAME], lambda v: v == "[memory]", "")]
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
        builder._flows.append(_flow_columns(builder, p, flows, flow_phase))


def _split(p: _Piece) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows of the complete events, of the instant events and of the flow events, and
    each flow event's phase (by ``_PHASES``)."""
    shifted = p.p.spans[:, sc.PH].astype(np.intp)
    shifted += 1
    present = _where(np.bincount(shifted)).tolist()
    values = ["", *p.values]
    phases = [_phase(values[i]) for i in present]
    if len(set(phases)) == 1:  # a piece of one phase: no per-event work
        every, none = np.arange(len(shifted)), np.empty(0, dtype=np.intp)
        flows = every if phases[0] >= _FLOW_START else none
        return (every if phases[0] == _COMPLETE else none,
                every if phases[0] == _INSTANT else none,
                flows, _filled(len(flows), phases[0], dtype=np.uint8))
    table = np.zeros(len(values), dtype=np.uint8)
    table[present] = phases
    phase = table[shifted]
    flows = _where(phase >= _FLOW_START)
    return (_where(phase == _COMPLETE), _where(phase == _INSTANT), flows,
            phase[flows])


def _modelled(builder: ColumnBuilder, p: _Piece, events: _Rows, memory: np.ndarray,
              flows: np.ndarray) -> bool:
    """Whether ``add`` would read these events without an error, a repair or a rare branch
    (unhashable categories, names or threads), the cases left to it."""
    nums = p.p.numbers
    # (A sum is NaN where a value is: times are finite numbers when they are present.)
    if np.isnan(events.of(nums, sc.TS).sum()) or np.isnan(nums[memory, sc.TS]).any():
        return False  # a missing time: add() raises
    if (builder.t0 is None and not len(events) and not len(memory)
            and np.isnan(nums[flows, sc.TS]).any()):
        return False  # the time origin taken from flows without a time: add() raises
    if len(events) and not events.of(nums, sc.DUR).max() <= MAX_DURATION_US:
        return False  # a null duration (the maximum is then NaN), or one add() refuses
    return _hashable(p) or _hashable_rows(p, np.concatenate([events.rows, memory, flows]))


def _hashable(p: _Piece) -> bool:
    """Whether no event of the piece has a list or an object as category, name, pid or tid
    (the piece's tables of (cat, name) and (pid, tid) pairs hold every event's)."""
    codes = {*p.p.cat_names.reshape(-1).tolist(), *p.p.threads.reshape(-1).tolist()}
    codes.discard(-1)
    values = p.values
    return not any([isinstance(values[c], list | dict) for c in codes])


def _hashable_rows(p: _Piece, rows: np.ndarray) -> bool:
    """Whether none of the events ``rows`` has a list or an object as category, name, pid or
    tid."""
    for column in (sc.CAT, sc.NAME, sc.PID, sc.TID):
        codes = p.p.spans[rows, column]
        present = _where(np.bincount(codes + 1, minlength=1)) - 1
        if any(isinstance(p.value(c, None), list | dict) for c in present.tolist()):
            return False
    return True


def _first_seen(codes: np.ndarray, count: int) -> list[int]:
    """The distinct ``codes`` (each in 0..count-1) in order of first occurrence."""
    first = _filled(count, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    present = _where(first < len(codes))
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

    found = _looked_up(codes, p.thread_keys, raw, new)
    return np.array([-1 if f is None else f for f in found], dtype=np.int32)[codes]


def _ids(values: np.ndarray) -> np.ndarray:
    return np.where(values == sc.NO_ID, -1, values)


def _complete(builder: ColumnBuilder, p: _Piece, events: _Rows) -> dict[str, np.ndarray]:
    """``ColumnBuilder._complete`` for the ``events``."""
    piece = p.p
    codes = events.of(piece.tuples, sc.CAT_NAME)
    values = [*p.values, ""]  # the code -1 reads the default
    keys = [(values[cat], values[name]) for cat, name in piece.cat_names.tolist()]
    hits = np.array([h or (0, -1, 0) for h in
                     _looked_up(codes, keys, builder._kinds, builder._describe)], dtype=np.int64)
    kinds = hits[:, 0].astype(np.uint8)
    flags = hits[:, 2].astype(np.uint8)
    dur = events.of(piece.numbers, sc.DUR)
    if dur.min() < 0:
        builder.negative_durations += int(np.count_nonzero(dur < 0))
        dur = np.maximum(dur, 0.0)
    external = events.of(piece.ids, sc.EXTERNAL_ID)
    cols = {
        "kind": kinds[codes],
        "name": hits[:, 1].astype(np.int32)[codes],
        "flags": flags[codes],
        "ts": events.of(piece.numbers, sc.TS) - builder.t0,
        "dur": np.ascontiguousarray(dur),
        "tid": _thread_ids(builder, p, events.of(piece.tuples, sc.THREAD)),
        "correlation": _ids(events.of(piece.ids, sc.CORRELATION)),
        "external_id": np.where(external != sc.NO_ID, external,
                                _ids(events.of(piece.ids, sc.EXTERNAL_ID_OLD))),
    }
    # What else each event has, by its (cat, name): one bit per group of fields below.
    is_kernel = kinds == Kind.KERNEL
    group_of = (_IS_DEVICE[kinds] * _DEVICE + _IS_HOST_OP[kinds] * _HOST_OP
                + (is_kernel | ((flags & model.FLAG_COMM) != 0)) * _DETAILED
                + is_kernel * _KERNEL).astype(np.uint8)
    # (The piece's (cat, name) pairs without a bit: none of its events has the bit.)
    groups = group_of[codes] if group_of.any() else np.zeros(len(codes), dtype=np.uint8)
    device = _where(groups & _DEVICE) if (group_of & _DEVICE).any() else _NONE
    cols.update(_device_fields(p, events, device))
    cols.update(_op_fields(builder, p, events, groups, group_of))
    return cols


def _device_fields(p: _Piece, events: _Rows, idx: np.ndarray) -> dict[str, np.ndarray]:
    """``ColumnBuilder._device_fields``: the device from args.device (else pid), the stream
    from args.stream (else tid), for kernels, copies and memsets (the events at ``idx``)."""
    n = len(events)
    out: dict[str, np.ndarray] = {
        "device": _filled(n, -1, dtype=np.int16),
        "stream": _filled(n, -1, dtype=np.int64),
        "blocks_per_sm": _filled(n, np.nan, dtype=np.float32),
        "occupancy": _filled(n, np.nan, dtype=np.float32),
        "nbytes": _filled(n, np.nan, dtype=np.float64),
    }
    if not len(idx):
        return out
    at = events.at(idx)
    spans, nums = p.p.spans, p.p.numbers
    out["device"][idx] = _either(p, spans[:, sc.DEVICE][at], spans[:, sc.PID][at], device_id)
    out["stream"][idx] = _either(p, spans[:, sc.STREAM][at], spans[:, sc.TID][at],
                                 lambda v: int_or(v, -1))
    out["blocks_per_sm"][idx] = nums[:, sc.BLOCKS_PER_SM][at]
    out["occupancy"][idx] = nums[:, sc.OCCUPANCY][at]
    out["nbytes"][idx] = nums[:, sc.BYTES][at]
    return out


def _either(p: _Piece, own: np.ndarray, instead: np.ndarray, rule: Callable[[Any], int]
            ) -> np.ndarray:
    """``rule`` of each args value (codes ``own``), or of the event's own value (codes
    ``instead``; default 0) when that one is null or absent."""
    got = p.mapped(own, lambda v: _UNSET if v is None else rule(v), None, np.int64)
    unset = _where(got == _UNSET)
    if len(unset):
        got[unset] = p.mapped(instead[unset], rule, 0, np.int64)
    return got


def _interned(table: dict[bytes, int], keys: np.ndarray, count: int,
              text: Callable[[int], bytes]) -> np.ndarray:
    """``columns._interned``: each key's index in ``table`` (the new ``text(key)`` added in
    order of first occurrence); -1 for the key -1 (absent). Keys are 0..count-1."""
    out = _filled(len(keys), -1, dtype=np.int32)
    present = _where(keys >= 0)
    if not len(present):
        return out
    codes = np.empty(count, dtype=np.int32)
    for k in _first_seen(keys[present], count):
        codes[k] = table.setdefault(text(k), len(table))
    out[present] = codes[keys[present]]
    return out


def _op_fields(builder: ColumnBuilder, p: _Piece, events: _Rows, groups: np.ndarray,
               group_of: np.ndarray) -> dict[str, np.ndarray]:
    """``ColumnBuilder._op_fields``: shapes, stacks, FLOPs of host ops; launch and collective
    details of kernels and communication (by ``groups``, the bits of ``_complete``, and
    ``group_of``, those of the piece's (cat, name) pairs)."""
    n = len(events)
    shape = _filled(n, -1, dtype=np.int32)
    stack = _filled(n, -1, dtype=np.int32)
    detail = _filled(n, -1, dtype=np.int32)
    flops = _filled(n, np.nan)
    op_args = _filled(n, -1, dtype=np.int32)
    if not (group_of & (_HOST_OP | _DETAILED)).any():
        return {"shape": shape, "stack": stack, "detail": detail, "flops": flops,
                "op_args": op_args}
    has_args = p.p.has_args if events.every else p.p.has_args[events.rows]
    groups = groups * has_args  # none without args
    ops = _where(groups & _HOST_OP) if (group_of & _HOST_OP).any() else _NONE
    if len(ops):
        _host_op_fields(builder, p, events.at(ops), ops, shape, stack, op_args)
        flops[ops] = events.of(p.p.numbers, sc.FLOPS, ops)
    wanted = _where(groups & _DETAILED) if (group_of & _DETAILED).any() else _NONE
    if len(wanted):
        _details(builder, p, events.of(p.p.tuples, sc.DETAIL, wanted),
                 (groups[wanted] & _KERNEL) != 0, wanted, detail)
    return {"shape": shape, "stack": stack, "detail": detail, "flops": flops,
            "op_args": op_args}


def _host_op_fields(builder: ColumnBuilder, p: _Piece, rows: np.ndarray, ops: np.ndarray,
                    shape: np.ndarray, stack: np.ndarray, op_args: np.ndarray) -> None:
    """Shapes, stacks, and types with values, of the host ops ``ops`` (the piece's
    ``rows``)."""
    texts, spans = p.p.texts, p.p.spans
    shape[ops] = _interned(builder._shapes, spans[:, sc.INPUT_DIMS][rows], len(texts),
                           texts.__getitem__)
    stack[ops] = _interned(builder._stacks, spans[:, sc.CALL_STACK][rows], len(texts),
                           texts.__getitem__)
    shaped = _where(shape[ops] >= 0)
    if not len(shaped):
        return
    absent = len(texts)
    types = spans[:, sc.INPUT_TYPES][rows[shaped]]
    values = spans[:, sc.CONCRETE][rows[shaped]]
    # (types, values) numbered densely; neither: no text (columns._types_and_values)
    pairs, both = np.unique(np.where(types < 0, absent, types).astype(np.int64)
                            * (absent + 1) + np.where(values < 0, absent, values),
                            return_inverse=True)
    both = both.reshape(-1)
    both[(types < 0) & (values < 0)] = -1

    def joined(k: int) -> bytes:
        t, v = divmod(int(pairs[k]), absent + 1)
        return (b"[" + (b"null" if t == absent else texts[t]) + b"," +
                (b"null" if v == absent else texts[v]) + b"]")

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
    present = _where(np.bincount(keys, minlength=count))
    made = _made_details(p, p.p.details[present // 2].tolist(), (present % 2).tolist())
    table = np.empty(count, dtype=object)
    table[present] = made
    exists = np.zeros(count, dtype=bool)
    exists[present] = [d is not None for d in made]
    has = _where(exists[keys])
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
    nums = p.p.numbers.take(rows, axis=0)
    return {
        "ts": nums[:, sc.TS] - builder.t0,
        "device_type": np.nan_to_num(nums[:, sc.DEVICE_TYPE], nan=-1),
        "device_id": np.nan_to_num(nums[:, sc.DEVICE_ID], nan=-1),
        "nbytes": nums[:, sc.MEM_BYTES].copy(),
        "total_allocated": nums[:, sc.TOTAL_ALLOCATED].copy(),
        "total_reserved": nums[:, sc.TOTAL_RESERVED].copy(),
        "addr": nums[:, sc.ADDR].copy(),
        "tid": _thread_ids(builder, p, p.p.tuples[:, sc.THREAD][rows]),
    }


def _flow_columns(builder: ColumnBuilder, p: _Piece, rows: np.ndarray, phase: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """``ColumnBuilder._flow_columns``."""
    return {
        "id": _ids(p.p.ids[:, sc.ID][rows]),
        "phase": (phase == _FLOW_STEP).view(np.uint8),
        "ts": p.p.numbers[:, sc.TS][rows] - builder.t0,
        "tid": _thread_ids(builder, p, p.p.tuples[:, sc.THREAD][rows]),
        "forward_backward": p.mapped(p.p.spans[:, sc.CAT][rows],
                                     lambda v: v == "fwdbwd" or v == "forward_backward", ""),
    }
