"""The precision an op computes in, read from its recorded ``Input type`` (``record_shapes=True``).

An op's precision is that of its narrowest floating-point input of at least one dimension
(indices, masks, scalars and 0-dim tensors aside): ``narrow`` when any input is 16- or 8-bit (bf16 ``c10::BFloat16``, fp16 ``c10::Half``,
fp8 ``c10::Float8_e4m3fn`` ..., int8 ``signed char``), else ``fp32`` (``float``), else ``fp64``
(``double``); ``unknown`` without recorded types. A cast (``aten::copy_`` from double to float)
is fp32: only an op whose every floating input is double computes in fp64.
See docs/metrics.md, "Op precision".
"""

from __future__ import annotations

import json
from enum import IntEnum

import msgspec
import numpy as np

from trainprof.analysis.calls.calltree import CallTree, canonical_names
from trainprof.analysis.roofline.cost import dtype_info
from trainprof.analysis.tabular import group_ids
from trainprof.structs import Record
from trainprof.trace.model import Trace

_CACHE = "_trainprof_op_precisions"


class Precision(IntEnum):
    """What an op computes in, by its inputs."""

    UNKNOWN = 0
    NARROW = 1  # 16- or 8-bit
    FP32 = 2
    FP64 = 3


_NARROW_DTYPES = frozenset({"bf16", "fp16", "fp8"})


def precision_of_types(types: object, dims: object = None) -> Precision:
    """The precision of an op from its ``Input type`` list; with its ``Input Dims``, only the
    inputs of at least one dimension count (a 0-dim double, e.g. a Python scalar wrapped as a
    tensor, is not the op's precision)."""
    found: set[str] = set()
    shapes = dims if isinstance(dims, list) else None
    for i, t in enumerate(types if isinstance(types, list) else []):
        if shapes is not None and not (i < len(shapes) and isinstance(shapes[i], list)
                                       and shapes[i]):
            continue
        if isinstance(t, str) and t.lower() in ("signed char", "unsigned char"):
            found.update(["int8"] if t.lower() == "signed char" else [])  # uint8: a mask
            continue
        info = dtype_info(t)
        if info is not None:
            found.add(info[1])
    if found & (_NARROW_DTYPES | {"int8"}):
        return Precision.NARROW
    if "fp32" in found:
        return Precision.FP32
    return Precision.FP64 if "fp64" in found else Precision.UNKNOWN


def op_precisions(trace: Trace) -> np.ndarray:
    """Per event, its ``Precision`` (uint8; UNKNOWN for events without recorded types).
    Cached on the trace."""
    cached = trace.__dict__.get(_CACHE)
    if cached is not None:
        return cached
    ev = trace.events
    out = np.zeros(len(ev), dtype=np.uint8)
    has = np.flatnonzero(ev.op_args >= 0)
    if len(has):
        first, group = group_ids(ev.op_args[has], ev.shape[has])
        per_pair = np.array([_precision(ev.op_arg_texts[ev.op_args[e]],
                                        ev.shapes[ev.shape[e]] if ev.shape[e] >= 0 else None)
                             for e in has[first].tolist()], dtype=np.uint8)
        out[has] = per_pair[group]
    trace.__dict__[_CACHE] = out
    return out


def _precision(args_text: str, dims_text: str | None) -> Precision:
    try:
        types = json.loads(args_text)[0] if args_text else None
        dims = json.loads(dims_text) if dims_text else None
    except (ValueError, TypeError, IndexError, KeyError):
        return Precision.UNKNOWN
    return precision_of_types(types, dims)


class PrecisionSums(msgspec.Struct):
    """Per op name (canonical name index, ascending): the calls of the outermost ops that
    compute in one precision, and their host and device total time (µs)."""

    name: np.ndarray
    calls: np.ndarray
    host_us: np.ndarray
    device_us: np.ndarray

    @classmethod
    def concat(cls, parts: list[PrecisionSums]) -> PrecisionSums:
        """The sums of several windows, regrouped by name."""
        name = np.concatenate([p.name for p in parts]) if parts else np.zeros(0, np.int64)
        first, group = group_ids(name)
        n = len(first)

        def total(key: str) -> np.ndarray:
            return np.bincount(group, weights=np.concatenate([getattr(p, key) for p in parts]),
                               minlength=n) if n else np.zeros(0)

        return cls(name[first], total("calls"), total("host_us"), total("device_us"))


def outermost_sums(trace: Trace, tree: CallTree, nodes: np.ndarray, precision: Precision,
                   times: dict[str, np.ndarray]) -> PrecisionSums:
    """The ops among ``nodes`` (call-tree nodes) that compute in ``precision`` with no such op
    above them (``aten::linear`` counts once, not again for its ``aten::addmm``), by name."""
    ev = trace.events
    mark = np.zeros(len(tree), dtype=bool)
    mark[nodes] = op_precisions(trace)[tree.event[nodes]] == precision
    outer = (np.flatnonzero(mark & (tree.nearest(mark, include_self=False) < 0)) if mark.any()
             else np.zeros(0, dtype=np.int64))
    names = canonical_names(ev.names)[ev.name[tree.event[outer]]]
    first, group = group_ids(names)
    n = len(first)
    return PrecisionSums(
        name=names[first], calls=np.bincount(group, minlength=n).astype(np.float64),
        host_us=np.bincount(group, weights=times["host_total"][outer], minlength=n),
        device_us=np.bincount(group, weights=times["device_total"][outer], minlength=n))


class PrecisionRow(Record):
    """One op name's outermost calls in one precision, inside the steps. Times in µs."""

    name: str
    calls: int
    host_us: float
    device_us: float


def precision_rows(sums: PrecisionSums, names: list[str]) -> list[PrecisionRow]:
    """The rows of the sums, heaviest (device time, else host time) first."""
    rows = [PrecisionRow(names[int(k)], int(c), float(h), float(d))
            for k, c, h, d in zip(sums.name, sums.calls, sums.host_us, sums.device_us,
                                  strict=True)]
    return sorted(rows, key=lambda r: (-max(r.device_us, r.host_us), r.name))
