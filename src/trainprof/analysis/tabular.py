"""Small helpers the table-shaped results share: grouping and summaries."""

from __future__ import annotations

import msgspec
import numpy as np


def group_ids(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first member of each group, group id of each element) for equal tuples of ``keys``."""
    n = len(keys[0])
    if not n:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    cols = [np.asarray(k, dtype=np.int64) for k in keys]
    spans = [int(c.max()) - int(c.min()) + 1 for c in cols]
    if float(np.prod(np.array(spans, dtype=np.float64))) < 2.0**62:
        combined = np.zeros(n, dtype=np.int64)
        for c, span in zip(cols, spans, strict=True):
            combined = combined * span + (c - c.min())
        _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    else:  # keys too wide to pack into one integer
        _, first, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_index=True,
                                      return_inverse=True)
    return first, inverse.reshape(-1)


class Quantiles(msgspec.Struct):
    """Mean, median, p90 and max of a sample (None each when it is empty)."""

    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    max: float | None = None


def summary(values: np.ndarray) -> Quantiles:
    """Mean, median, p90 and max of a sample (None each when it is empty)."""
    if not len(values):
        return Quantiles()
    return Quantiles(mean=float(values.mean()), median=float(np.median(values)),
                     p90=float(np.percentile(values, 90)), max=float(values.max()))


def share(part: float, whole: float) -> float | None:
    """``part / whole`` in percent, None when the whole is empty."""
    return float(part) / float(whole) * 100.0 if whole > 0 else None
