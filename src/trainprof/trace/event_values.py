"""Rules that read one event's value (an id, a device, a stream), shared by the two ways
columns are built (trace/columns.py from typed events, trace/piece_columns.py from a scanned
piece)."""

from __future__ import annotations

import math
from typing import Any

from trainprof.lazy import LazyPattern
from trainprof.trace.model import Kind

#: The longest duration read as one: a profiled window is seconds to hours; a number past this
#: (11.6 days) is damage, and sums of numbers near 1e308 would overflow to infinity.
MAX_DURATION_US = 1e12
#: Kinds whose events run on a device (their device, stream, occupancy and bytes are read).
DEVICE_KINDS = [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]
#: Kinds whose events are host ops (shapes, stacks and FLOPs are read for them).
HOST_OP_KINDS = [Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON]


def int_or(value: Any, default: int, limit: int = 2**62) -> int:
    """``value`` as an int ("stream 7" gives 7), or ``default`` when it is none or out of range
    (|value| >= ``limit``)."""
    out = default
    if type(value) is int:
        out = value
    elif isinstance(value, float) and math.isfinite(value) and value == int(value):
        out = int(value)
    elif isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        if digits.lstrip("-").isdigit():
            out = int(digits)
    return out if -limit < out < limit else default


TRAILING_NUMBER = LazyPattern(r"(\d{1,4})\D*$")


def device_id(value: Any) -> int:
    """A device event's device number: an int, the number ending a label ("mtia:1" gives 1,
    for accelerators whose pid is a name), or 0 when the label has none."""
    out = int_or(value, -1, 2**15)
    if out < 0 and isinstance(value, str):
        match = TRAILING_NUMBER.search(value)
        out = int(match.group(1)) if match else 0
    return out


def canonical_id(value: Any) -> Any:
    """A pid or tid as an int when it is one written as a string."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value
