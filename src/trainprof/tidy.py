"""Floats as people read them in JSON and CSV: 12 significant digits, so that binary noise
(``177.44299999999998``) is written ``177.443`` in the analysis, compare and history outputs
alike. Twelve digits keep every figure exact to far below what a trace can measure (a µs in a
day is one part in 10^11)."""

from __future__ import annotations

import math
from typing import Any

SIGNIFICANT_DIGITS = 12


def tidy_float(x: float) -> float:
    """``x`` rounded to ``SIGNIFICANT_DIGITS``; non-finite values as they are."""
    if not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


def tidy(value: Any) -> Any:
    """A JSON-ready value with every float tidied (dicts, lists and tuples walked)."""
    if isinstance(value, float):
        return tidy_float(value)
    if isinstance(value, dict):
        return {k: tidy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [tidy(v) for v in value]
    return value
