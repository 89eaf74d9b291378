"""Each matched collective split into arrival skew and transfer, and the skew charged to the
rank that arrived last (docs/communication.md, "Arrival skew and transfer").

A collective cannot start moving data before every rank has called it. For one matched
instance (the same collective on every rank, analysis/job/stragglers.py), on the traces'
clocks:

* **arrival skew** of a rank = the last rank's start minus its own start: the time it waits
  for the last one to arrive, kept within its own call ``[0, duration]`` (a clock offset
  between machines cannot make a rank wait longer than its call lasted);
* **transfer** = the rest of its call, from the last arrival to its end;
* the rank that started last is **late**; the skew the others spent waiting for it is charged
  to it.

Sums per rank are unions of intervals per step (collectives running at once, DDP's buckets on
gloo's threads, count once), cut at the step's end, divided by the matched steps.
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis import intervals as iv


class Arrival(msgspec.Struct):
    """Per rank (rows in the ranks' order), ms per matched step."""

    skew_ms: np.ndarray  # waiting for the last rank to arrive
    transfer_ms: np.ndarray  # from the last arrival to the end of its call
    late: np.ndarray  # instances it started last (trace clocks)
    caused_ms: np.ndarray  # the other ranks' mean skew in the instances it started last
    skew_pct: float | None  # skew over all time in the matched collectives, every rank


def waiting_us(start: np.ndarray, wait: np.ndarray, step_end: np.ndarray,
               pick: np.ndarray) -> float:
    """Time one rank spends in ``[start, start + wait)`` over the picked instances, each cut at
    its step's end; instances running at once count once, so that a rank never waits longer
    than its steps run."""
    m = pick & (wait > 0)
    return iv.union(start[m], np.minimum(start[m] + wait[m], step_end[m])).total()


def arrival(start: np.ndarray, dur: np.ndarray, step_end: np.ndarray, n_steps: int) -> Arrival:
    """The split of every matched instance; matrices are (rank, instance)."""
    ranks, count = start.shape
    if not count:
        zero = np.zeros(ranks)
        return Arrival(zero, zero.copy(), np.zeros(ranks, dtype=np.int64), zero.copy(), None)
    skew = np.clip(start.max(axis=0) - start, 0.0, dur)
    late = np.argmax(start, axis=0)
    every = np.ones(count, dtype=bool)
    per_step = max(n_steps, 1) * 1000.0
    skew_ms = np.array([waiting_us(start[i], skew[i], step_end[i], every)
                        for i in range(ranks)]) / per_step
    transfer_ms = np.array([waiting_us(start[i] + skew[i], dur[i] - skew[i], step_end[i], every)
                            for i in range(ranks)]) / per_step
    caused_ms = _caused_us(start, skew, step_end, late) / per_step
    total = float(dur.sum())
    return Arrival(skew_ms, transfer_ms, np.bincount(late, minlength=ranks), caused_ms,
                   float(skew.sum()) / total * 100.0 if total > 0 else None)


def _caused_us(start: np.ndarray, skew: np.ndarray, step_end: np.ndarray,
               late: np.ndarray) -> np.ndarray:
    """Per rank, the other ranks' mean skew over the instances it started last: each rank's
    instances taken once (grouped by the late rank), not once per pair of ranks."""
    ranks = start.shape[0]
    out = np.zeros(ranks)
    if ranks < 2:
        return out
    for i in np.unique(late):
        cols = np.flatnonzero(late == i)
        pick = np.ones(len(cols), dtype=bool)
        out[i] = np.mean([waiting_us(start[j, cols], skew[j, cols], step_end[j, cols], pick)
                          for j in range(ranks) if j != i])
    return out
