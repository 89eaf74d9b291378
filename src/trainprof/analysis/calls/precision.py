"""The precision an op computes in, read from its recorded ``Input type`` (``record_shapes=True``).

An op's precision is that of its narrowest floating-point input (indices, masks and scalars
aside): ``narrow`` when any input is 16- or 8-bit (bf16 ``c10::BFloat16``, fp16 ``c10::Half``,
fp8 ``c10::Float8_e4m3fn`` ..., int8 ``signed char``), else ``fp32`` (``float``), else ``fp64``
(``double``); ``unknown`` without recorded types. A cast (``aten::copy_`` from double to float)
is fp32: only an op whose every floating input is double computes in fp64.
See docs/metrics.md, "Op precision".
"""

from __future__ import annotations

import json
from enum import IntEnum

import numpy as np

from trainprof.analysis.roofline.cost import dtype_info
from trainprof.trace.model import Trace

_CACHE = "_trainprof_op_precisions"


class Precision(IntEnum):
    """What an op computes in, by its inputs."""

    UNKNOWN = 0
    NARROW = 1  # 16- or 8-bit
    FP32 = 2
    FP64 = 3


_NARROW_DTYPES = frozenset({"bf16", "fp16", "fp8"})


def precision_of_types(types: object) -> Precision:
    """The precision of an op from its ``Input type`` list."""
    found: set[str] = set()
    for t in types if isinstance(types, list) else []:
        if isinstance(t, str) and t.lower() == "signed char":  # int8 (uint8 is a mask)
            found.add("int8")
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
    per_text = np.zeros(len(ev.op_arg_texts), dtype=np.uint8)
    for i, text in enumerate(ev.op_arg_texts):
        try:
            types = json.loads(text)[0] if text else None
        except (ValueError, TypeError, IndexError, KeyError):
            types = None
        per_text[i] = precision_of_types(types)
    out = np.zeros(len(ev), dtype=np.uint8)
    has = ev.op_args >= 0
    out[has] = per_text[ev.op_args[has]]
    trace.__dict__[_CACHE] = out
    return out
