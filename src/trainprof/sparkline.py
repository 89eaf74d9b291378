"""A text sparkline (``▁▂▃▅▇``): a series at a glance in one line of a terminal.

Shared by the live view during training and by ``trainprof history``; no dependency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

BARS = "▁▂▃▄▅▆▇█"
#: Shown for a missing value (None or not finite).
GAP = " "


def sparkline(values: Sequence[float | None], width: int | None = None) -> str:
    """One bar per value, scaled from the smallest to the largest finite value.

    With ``width``, only the last ``width`` values are drawn. A flat series is drawn at mid
    height, so that a line of equal bars reads as "steady", not as "zero".
    """
    if width is not None:
        values = values[-width:] if width > 0 else []
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return GAP * len(values)
    low, high = min(finite), max(finite)
    top = len(BARS) - 1
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(GAP)
        elif high == low:
            out.append(BARS[top // 2])
        else:
            out.append(BARS[round((v - low) / (high - low) * top)])
    return "".join(out)
