"""What one op call costs: its class, FLOPs, bytes and dtype (``OpCost``), and the helpers
the models share to read recorded shapes, dtypes and scalar arguments (docs/roofline.md)."""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

# Element size and the peak-table dtype of each recorded ``Input type``.
_DTYPES: dict[str, tuple[int, str]] = {
    "double": (8, "fp64"), "float": (4, "fp32"), "c10::half": (2, "fp16"),
    "c10::bfloat16": (2, "bf16"), "c10::float8_e4m3fn": (1, "fp8"),
    "c10::float8_e5m2": (1, "fp8"), "c10::float8_e4m3fnuz": (1, "fp8"),
    "c10::float8_e5m2fnuz": (1, "fp8"), "signed char": (1, "int8"),
    "unsigned char": (1, "int8"), "int": (4, "int32"), "long int": (8, "int64"),
    "bool": (1, "bool"),
}


class OpCost(msgspec.Struct, frozen=True):
    """One call's work: its class, FLOPs, bytes read and written, and the dtype it computes in."""

    op_class: str
    flops: float
    bytes: float
    dtype: str  # peak-table dtype: fp32, bf16, fp8, ...
    dims: str  # a short shape label, e.g. "M=141 N=512 K=512"


def dtype_info(name: Any) -> tuple[int, str] | None:
    """(bytes per element, peak-table dtype) of an ``Input type`` entry, or None."""
    return _DTYPES.get(name.lower()) if isinstance(name, str) else None


def known_dtype(name: Any) -> tuple[int, str]:
    """``dtype_info`` of a dtype the cost models need: ValueError when it is unknown (the models'
    caller, roofline_models.model_for, counts the op as one it cannot model)."""
    info = dtype_info(name)
    if info is None:
        raise ValueError(f"unknown dtype {name!r}")
    return info


def numel(shape: Any) -> int:
    """Elements of a recorded shape; 0 for ``[]`` (a scalar, None or an absent tensor)."""
    return math.prod(shape) if isinstance(shape, list) and shape else 0


def is_shape(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(d, int) and d >= 0 for d in x)


def tensors(dims: list[Any], types: list[Any]) -> list[tuple[list[int], int, str]]:
    """The tensor arguments that have a known dtype: (shape, element size, dtype)."""
    out = []
    for shape, t in zip(dims, types, strict=False):
        info = dtype_info(t)
        if info is not None and is_shape(shape) and shape:
            out.append((shape, info[0], info[1]))
    return out


def concrete_ints(value: Any, n: int) -> list[int] | None:
    """A concrete list argument ("[1, 1]") as n ints (a single value repeats)."""
    if isinstance(value, str):
        found = [int(v) for v in re.findall(r"-?\d+", value)]
    elif isinstance(value, list):
        found = [v for v in value if isinstance(v, int)]
    else:
        return None
    if len(found) == 1:
        found = found * n
    return found if len(found) == n else None
