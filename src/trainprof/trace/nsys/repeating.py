"""Steps of a capture without step markers, from the repeating structure of its kernels.

A training loop launches the same kernels in each step. Two signs of a step are read from one
process's kernel sequence (in time order), the first that is clear:

- the optimizer's kernels (``multi_tensor_apply``, fused Adam/SGD/LAMB kernels) in one run per
  step: runs of them split where more than ``OPTIMIZER_RUN_GAP`` other kernels (or a quarter of
  the longest gap) separate two; clear when there are at least ``MIN_STEPS`` runs of nearly the
  same size with nearly the same number of kernels between them. A step ends with its
  optimizer run (steps run from one run's end to the next's, as torch's ``Optimizer.step``
  ranges bound them); the kernels before the first run are a step when they are as many as a
  step's, else the capture's partial first step, left out.
- the period of the kernel-name sequence: the shortest shift ``P`` at which at least
  ``PERIOD_MATCH`` of the names equal those ``P`` kernels later, with at least ``MIN_STEPS``
  whole periods; a step starts at the offset within the period after the longest device gap
  (the host's work between steps), and the partial periods at either end are left out.

Otherwise there are no steps and the whole capture stays one window (the step finder's note).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
import numpy as np

from trainprof.trace.model import Kind
from trainprof.trace.nsys.tables import Catalog, Rows, distinct, empty_rows

#: Kernels of torch's optimizers (foreach/fused implementations, apex's multi-tensor kernels).
#: (not "lamb" alone: every kernel of a lambda names ``{lambda(float)#1}``).
OPTIMIZER_KERNEL = re.compile(r"multi_tensor_apply|fused_?adam|fused_?sgd|fused_?lamb",
                              re.IGNORECASE)
#: At least this many steps (optimizer runs, or whole periods) make a structure clear.
MIN_STEPS = 3
#: Optimizer runs split where more than this many other kernels lie between two of its kernels.
OPTIMIZER_RUN_GAP = 16
#: Runs (and the kernels between them) count as the same size within this share of the median.
SIZE_TOLERANCE = 0.1
#: The share of kernels whose name equals the name one period later, for a clear period (a
#: model's repeated layers alone match about 0.9: 0.91 on the 2xH100 capture's 62-kernel block).
PERIOD_MATCH = 0.98
#: The shortest period considered, in kernels.
MIN_PERIOD = 4
#: The most occurrences per step of the rarest repeating name that the period search allows for.
MAX_PER_STEP = 8
#: Kernels of the sequence the period is looked for in (its start; a longer capture repeats).
PERIOD_WINDOW = 8192


class Found(msgspec.Struct):
    """Steps as [first, stop) ranges of kernel indices (time order), and how they were found."""

    bounds: list[tuple[int, int]]
    note: str


def repeating_steps(ids: np.ndarray, optimizer: np.ndarray, start: np.ndarray,
                    end: np.ndarray) -> Found | None:
    """The steps of one process's kernels in time order (``ids``: a number per distinct name;
    ``optimizer``: whether each is an optimizer's kernel, ``is_optimizer_kernel``; ``start``,
    ``end``: times), or None when no structure is clear."""
    return _by_optimizer(np.flatnonzero(optimizer)) or _by_period(ids, start, end)


def is_optimizer_kernel(name: str) -> bool:
    return OPTIMIZER_KERNEL.search(name) is not None


def _by_optimizer(at: np.ndarray) -> Found | None:
    """Steps ending with the runs of the optimizer's kernels (at these kernel indices)."""
    if len(at) < MIN_STEPS:
        return None
    gaps = np.diff(at) - 1
    split = max(OPTIMIZER_RUN_GAP, int(gaps.max(initial=0)) // 4)
    cut = np.flatnonzero(gaps > split)
    firsts, lasts = at[np.r_[0, cut + 1]], at[np.r_[cut, len(at) - 1]]
    if len(firsts) < MIN_STEPS or not _same(lasts - firsts) or not _same(np.diff(lasts)):
        return None
    stops = (lasts + 1).tolist()
    bounds = list(zip(stops[:-1], stops[1:], strict=True))
    typical = int(_median(np.diff(lasts)))
    if stops[0] >= typical * (1 - SIZE_TOLERANCE):
        bounds.insert(0, (max(stops[0] - typical, 0), stops[0]))
    return Found(bounds, f"{len(bounds)} step(s) found from the optimizer's kernels "
                         "(multi_tensor_apply, fused Adam/SGD/LAMB), one run of them ending "
                         "each step: the capture has no step marker.")


def _by_period(ids: np.ndarray, start: np.ndarray, end: np.ndarray) -> Found | None:
    window = ids[:PERIOD_WINDOW]
    period = next((p for p in _candidates(window) if _match(window, p) >= PERIOD_MATCH), None)
    if period is None or period < MIN_PERIOD:
        return None
    firsts = list(range(_phase(period, start, end), len(ids) - period + 1, period))
    if len(firsts) < MIN_STEPS:
        return None
    return Found([(f, f + period) for f in firsts],
                 f"{len(firsts)} step(s) found from the period of the kernel sequence "
                 f"({period} kernels; {_match(window, period):.1%} of the kernels are named as "
                 "the kernel one period later): the capture has no step marker.")


def _match(ids: np.ndarray, period: int) -> float:
    """The share of kernels named as the kernel ``period`` later."""
    return float(np.mean(ids[:-period] == ids[period:])) if 0 < period < len(ids) else 0.0


def _candidates(ids: np.ndarray) -> list[int]:
    """Periods worth testing, ascending: the distances between the occurrences of the rarest
    name that occurs ``MIN_STEPS`` times or more (a step's sequence holds it once, or a few
    times, up to ``MAX_PER_STEP``: then the sums of that many consecutive distances)."""
    counts = np.bincount(ids) if len(ids) else np.empty(0, np.int64)
    often = np.flatnonzero(counts >= MIN_STEPS)
    if not len(often) or len(ids) < MIN_STEPS * MIN_PERIOD:
        return []
    rarest = int(often[np.argmin(counts[often])])
    at = np.flatnonzero(ids == rarest)
    out: set[int] = set()
    for k in range(1, min(MAX_PER_STEP, len(at) // MIN_STEPS) + 1):
        out.update((at[k:] - at[:-k]).tolist())
    return sorted(p for p in out if p <= len(ids) // MIN_STEPS)


def _phase(period: int, start: np.ndarray, end: np.ndarray) -> int:
    """The offset within the period whose kernel most often follows the longest device gap."""
    n = len(start)
    gap = np.full(n, -np.inf)
    gap[1:] = start[1:] - np.maximum.accumulate(end)[:-1]
    whole = n // period * period
    per_offset = _median(gap[:whole].reshape(-1, period)[1:], axis=0) if whole >= 2 * period \
        else gap[:period]
    return int(np.argmax(per_offset))


def _median(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """``np.median`` along the first axis, without its NaN check (the values hold none), which
    imports numpy.ma under numpy 2.4: 17 ms of a read."""
    ordered = np.sort(values, axis=axis)
    n = ordered.shape[0]
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2


def _same(sizes: np.ndarray) -> bool:
    """Whether the sizes are all within ``SIZE_TOLERANCE`` of their median."""
    if not len(sizes):
        return False
    median = float(_median(sizes))
    return bool(np.all(np.abs(sizes - median) <= SIZE_TOLERANCE * median + 1))


def step_rows(cat: Catalog, kernels: Rows, rows: Rows, launches: Callable[[], np.ndarray],
              process: int) -> tuple[Rows | None, str | None]:
    """One process's steps found from its kernels (``Rows`` in time order) as step rows named
    ``ProfilerStep#N``, and the note on how they were found; (None, None) when none are clear.
    A step's range is on the host, from its first kernel's launch to the next step's first
    launch (the last: its last launch's end), so that it is re-timed to the device as a
    recorded step; where a kernel has no launch among ``launches()`` (the indices of the
    process's CUDA calls in ``rows``, asked for only when steps are found), on the device's
    times."""
    names, ids = distinct(kernels.name)
    optimizer = np.array([is_optimizer_kernel(cat.names[i]) for i in names.tolist()], bool)
    found = repeating_steps(ids, optimizer[ids], kernels.start, kernels.end)
    if found is None:
        return None, None
    calls = launches()
    at = _launch_of(kernels.correlation, rows.correlation[calls])
    host = bool(len(at)) and bool(np.all(at >= 0))
    at = calls[at]
    start = rows.start[at] if host else kernels.start
    end = rows.end[at] if host else kernels.end
    firsts = [f for f, _ in found.bounds]
    stops = [s for _, s in found.bounds]
    starts = start[firsts]
    ends = np.array([start[s] - 1 if s < len(start) else int(end[f:s].max())
                     for f, s in zip(firsts, stops, strict=True)], np.int64)
    lane = rows.lane[at[firsts]] if host else np.tile([process, 0], (len(firsts), 1))
    n = len(firsts)
    rows = empty_rows(n, start=starts.astype(np.int64), end=np.maximum(ends, starts),
                      process=np.full(n, process, np.int64), lane=lane.astype(np.int64),
                      kind=np.full(n, Kind.STEP, np.uint8),
                      name=np.array([cat.name(Kind.STEP, f"ProfilerStep#{k}")
                                     for k in range(1, n + 1)], np.int32))
    return rows, found.note


def _launch_of(correlation: np.ndarray, launches: np.ndarray) -> np.ndarray:
    """The index into ``launches`` (their correlation ids) of each kernel's launch, -1
    without."""
    if not len(launches):
        return np.full(len(correlation), -1, np.int64)
    order = np.argsort(launches, kind="stable")
    sorted_corr = launches[order]
    pos = np.minimum(np.searchsorted(sorted_corr, correlation), len(order) - 1)
    return np.where(sorted_corr[pos] == correlation, order[pos], -1)
