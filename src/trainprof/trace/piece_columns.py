"""``ColumnBuilder.add`` for a piece the compiled scanner read (trace/scan.py), with numpy.

The result is exactly what ``ColumnBuilder.add`` gives for the same events decoded by msgspec:
the same columns, and the builder's tables (names, threads, shapes, stacks, details...) grown
in the same order. Each unique value text of the piece is decoded once and the per-value rules
of trace/columns.py (``_device_id``, ``_int_or``, ``model.classify``...) run once per unique
value; the events only meet numpy. A piece with something the fast path does not model (a
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


class _Piece:
    """A scanned piece with its unique values decoded, looked up per column."""

    def __init__(self, piece: sc.ScannedPiece) -> None:
        self.p = piece
        self.values = piece.values()
        self.absent = len(self.values)  # the index an absent value (code -1) reads

    def index(self, column: int, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Per event, the index of its value in ``values`` (``absent`` when absent)."""
        codes = self.p.spans[rows, column]
        return np.where(codes < 0, self.absent, codes)

    def mapped(self, index: np.ndarray, rule: Callable[[Any], Any], default: Any,
               dtype: Any = bool) -> np.ndarray:
        """``rule`` of each event's value (``index`` from ``index()``; ``default`` when absent),
        computed once per distinct value."""
        present = np.flatnonzero(np.bincount(index, minlength=self.absent + 1))
        out = np.zeros(self.absent + 1, dtype=dtype)
        out[present] = [rule(self.value(i, default)) for i in present.tolist()]
        return out[index]

    def value(self, index: int, default: Any) -> Any:
        """The value at ``index`` (a code, or ``absent`` for an absent value, as is -1)."""
        return default if index < 0 or index == self.absent else self.values[index]


def add_scanned(builder: ColumnBuilder, piece: sc.ScannedPiece) -> None:
    """``builder.add`` for the scanned piece."""
    p = _Piece(piece)
    ph = p.index(sc.PH)
    complete = np.flatnonzero(p.mapped(ph, lambda v: v == "X", ""))
    memory = np.flatnonzero(p.mapped(ph, lambda v: v in ("i", "I"), "")
                            & p.mapped(p.index(sc.NAME), lambda v: v == "[memory]", ""))
    flows = np.flatnonzero(p.mapped(ph, lambda v: v in ("s", "f", "t"), ""))
    if not _modelled(builder, p, complete, memory, flows):
        sc.SCAN_STATS["redecoded"] += 1
        builder.add(piece.events())
        return
    if builder.t0 is None and (len(complete) or len(memory) or len(flows)):
        first = complete if len(complete) else memory if len(memory) else flows
        builder.t0 = builder._first_ts(piece.numbers[first, sc.TS])
    if len(complete):
        builder._events.append(_complete(builder, p, complete))
    if len(memory):
        builder._memory.append(_memory_columns(builder, p, memory))
    if len(flows):
        builder._flows.append(_flow_columns(builder, p, flows, ph[flows]))


def _modelled(builder: ColumnBuilder, p: _Piece, complete: np.ndarray, memory: np.ndarray,
              flows: np.ndarray) -> bool:
    """Whether ``add`` would read these events without an error, a repair or a rare branch
    (unhashable categories, names or threads), the cases left to it."""
    nums = p.p.numbers
    if np.isnan(nums[complete, sc.TS]).any() or np.isnan(nums[memory, sc.TS]).any():
        return False  # a missing time: add() raises
    if (builder.t0 is None and not len(complete) and not len(memory)
            and np.isnan(nums[flows, sc.TS]).any()):
        return False  # the time origin taken from flows without a time: add() raises
    dur = nums[complete, sc.DUR]
    if np.isnan(dur).any() or (len(dur) and dur.max() > MAX_DURATION_US):
        return False  # a null duration, or one add() refuses
    used = np.concatenate([complete, memory, flows])
    for column in (sc.CAT, sc.NAME, sc.PID, sc.TID):
        present = np.flatnonzero(np.bincount(p.index(column, used), minlength=p.absent + 1))
        if any(isinstance(p.value(i, None), list | dict) for i in present.tolist()):
            return False
    return True


def _first_seen(codes: np.ndarray, count: int) -> list[int]:
    """The distinct ``codes`` (each in 0..count-1) in order of first occurrence."""
    first = np.full(count, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    present = np.flatnonzero(first < len(codes))
    return present[np.argsort(first[present], kind="stable")].tolist()


def _thread_ids(builder: ColumnBuilder, p: _Piece, rows: np.ndarray) -> np.ndarray:
    """``ColumnBuilder._thread_ids`` for the events ``rows``."""
    codes = p.p.tuples[rows, sc.THREAD]
    table = p.p.threads
    raw, threads = builder._raw_threads, builder.threads
    out = np.empty(len(table), dtype=np.int32)
    for k in _first_seen(codes, len(table)):
        pid, tid = table[k].tolist()
        key = (p.value(pid, 0), p.value(tid, 0))
        if key not in raw:
            canonical = (canonical_id(key[0]), canonical_id(key[1]))
            raw[key] = threads.setdefault(canonical, len(threads))
        out[k] = raw[key]
    return out[codes]


def _ids(values: np.ndarray) -> np.ndarray:
    return np.where(values == sc.NO_ID, -1, values)


def _complete(builder: ColumnBuilder, p: _Piece, rows: np.ndarray) -> dict[str, np.ndarray]:
    """``ColumnBuilder._complete`` for the events ``rows``."""
    codes = p.p.tuples[rows, sc.CAT_NAME]
    table = p.p.cat_names
    hits = np.zeros((len(table), 3), dtype=np.int64)
    kinds = builder._kinds
    for k in _first_seen(codes, len(table)):
        cat, name = table[k].tolist()
        key = (p.value(cat, ""), p.value(name, ""))
        hits[k] = kinds.get(key) or builder._describe(key)
    hit = hits[codes]
    kind = hit[:, 0].astype(np.uint8)
    nums, ids = p.p.numbers[rows], p.p.ids[rows]
    dur = nums[:, sc.DUR]
    negative = int(np.count_nonzero(dur < 0))
    if negative:
        builder.negative_durations += negative
        dur = np.maximum(dur, 0.0)
    cols = {
        "kind": kind,
        "name": hit[:, 1].astype(np.int32),
        "flags": hit[:, 2].astype(np.uint8),
        "ts": nums[:, sc.TS] - builder.t0,
        "dur": np.ascontiguousarray(dur),
        "tid": _thread_ids(builder, p, rows),
        "correlation": _ids(ids[:, sc.CORRELATION]),
        "external_id": np.where(ids[:, sc.EXTERNAL_ID] != sc.NO_ID, ids[:, sc.EXTERNAL_ID],
                                _ids(ids[:, sc.EXTERNAL_ID_OLD])),
    }
    cols.update(_device_fields(p, rows, kind, nums))
    cols.update(_op_fields(builder, p, rows, kind, cols["flags"], nums))
    return cols


def _device_fields(p: _Piece, rows: np.ndarray, kind: np.ndarray, nums: np.ndarray
                   ) -> dict[str, np.ndarray]:
    """``ColumnBuilder._device_fields``: the device from args.device (else pid), the stream
    from args.stream (else tid), for kernels, copies and memsets."""
    n = len(rows)
    out: dict[str, np.ndarray] = {
        "device": np.full(n, -1, dtype=np.int16),
        "stream": np.full(n, -1, dtype=np.int64),
        "blocks_per_sm": np.full(n, np.nan, dtype=np.float32),
        "occupancy": np.full(n, np.nan, dtype=np.float32),
        "nbytes": np.full(n, np.nan, dtype=np.float64),
    }
    idx = np.flatnonzero(np.isin(kind, DEVICE_KINDS))
    if not len(idx):
        return out
    at = rows[idx]
    out["device"][idx] = _either(p, at, sc.DEVICE, sc.PID, device_id)
    out["stream"][idx] = _either(p, at, sc.STREAM, sc.TID, lambda v: int_or(v, -1))
    out["blocks_per_sm"][idx] = nums[idx, sc.BLOCKS_PER_SM]
    out["occupancy"][idx] = nums[idx, sc.OCCUPANCY]
    out["nbytes"][idx] = nums[idx, sc.BYTES]
    return out


def _either(p: _Piece, rows: np.ndarray, column: int, instead: int,
            rule: Callable[[Any], int]) -> np.ndarray:
    """``rule`` of the args value in ``column``, or of the event's ``instead`` value (default
    0) when that one is null or absent."""
    index = p.index(column, rows)
    is_none = p.mapped(index, lambda v: v is None, None)
    own = p.mapped(index, lambda v: 0 if v is None else rule(v), None, np.int64)
    other = p.mapped(p.index(instead, rows), rule, 0, np.int64)
    return np.where(is_none, other, own)


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


def _op_fields(builder: ColumnBuilder, p: _Piece, rows: np.ndarray, kind: np.ndarray,
               flags: np.ndarray, nums: np.ndarray) -> dict[str, np.ndarray]:
    """``ColumnBuilder._op_fields``: shapes, stacks, FLOPs; launch and collective details."""
    n = len(rows)
    shape = np.full(n, -1, dtype=np.int32)
    stack = np.full(n, -1, dtype=np.int32)
    detail = np.full(n, -1, dtype=np.int32)
    flops = np.full(n, np.nan)
    op_args = np.full(n, -1, dtype=np.int32)
    has_args = p.p.has_args[rows]
    texts = p.p.texts
    ops = np.flatnonzero(np.isin(kind, HOST_OP_KINDS) & has_args)
    if len(ops):
        spans = p.p.spans[rows[ops]]
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
        flops[ops] = nums[ops, sc.FLOPS]
    is_kernel = kind == Kind.KERNEL
    wanted = np.flatnonzero((is_kernel | ((flags & model.FLAG_COMM) != 0)) & has_args)
    if len(wanted):
        _details(builder, p, rows[wanted], is_kernel[wanted], wanted, detail)
    return {"shape": shape, "stack": stack, "detail": detail, "flops": flops,
            "op_args": op_args}


def _details(builder: ColumnBuilder, p: _Piece, rows: np.ndarray, on_device: np.ndarray,
             at: np.ndarray, detail: np.ndarray) -> None:
    """``_Args.kernel_detail`` (kernels) or ``_Args.detail`` of each event, appended to the
    builder's details (one dict per event, as ``add`` makes) and indexed in ``detail``."""
    codes = p.p.tuples[rows, sc.DETAIL]
    has_some = codes >= 0  # an event without any of these fields has no detail
    at = at[has_some]
    keys = codes[has_some].astype(np.int64) * 2 + on_device[has_some]
    made: list[dict[str, Any] | None] = [None] * (2 * len(p.p.details))
    for k in np.flatnonzero(np.bincount(keys, minlength=len(made))).tolist():
        made[k] = _detail(p, p.p.details[k // 2].tolist(), bool(k % 2))
    has = np.array([d is not None for d in made], dtype=bool)[keys]
    if not has.any():
        return
    start = len(builder.details)
    detail[at[has]] = np.arange(start, start + int(has.sum()), dtype=np.int32)
    builder.details.extend([dict(made[k] or {}) for k in keys[has].tolist()])


def _detail(p: _Piece, codes: list[int], on_device: bool) -> dict[str, Any] | None:
    fields = dict(zip(_DETAIL_FIELDS, (None if c < 0 else p.values[c] for c in codes),
                      strict=True))
    if on_device and fields["collective"] is None:
        if fields["grid"] is None and fields["block"] is None:
            return None
        return {k: fields[k] for k in ("grid", "block", "registers", "shared_memory")}
    return {k: v for k, v in fields.items() if v is not None} or None


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
        "tid": _thread_ids(builder, p, rows),
    }


def _flow_columns(builder: ColumnBuilder, p: _Piece, rows: np.ndarray, ph: np.ndarray
                  ) -> dict[str, np.ndarray]:
    """``ColumnBuilder._flow_columns``."""
    return {
        "id": _ids(p.p.ids[rows, sc.ID]),
        "phase": p.mapped(ph, lambda v: v != "s", "", np.uint8),
        "ts": p.p.numbers[rows, sc.TS] - builder.t0,
        "tid": _thread_ids(builder, p, rows),
        "forward_backward": p.mapped(p.index(sc.CAT, rows),
                                     lambda v: v == "fwdbwd" or v == "forward_backward", ""),
    }
