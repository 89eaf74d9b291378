"""The points of a trend: one per run, except that the rows the ranks of one job wrote (each
with its ``rank``, the same ``job`` within ``JOB_WINDOW_S`` of the first) make one point, their
steps pooled."""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.history.store.rows import RunRecord

JOB_WINDOW_S = 3600.0


class Point(msgspec.Struct):
    """One run of a series: one row, or the rows of one job's ranks."""

    rows: list[RunRecord]
    median_ms: float | None
    step_times_ms: list[float]
    samples_per_s: float | None
    #: What must match for runs to be compared: world size, devices, samples per step.
    setup: tuple

    @property
    def ids(self) -> list[int]:
        return [r.id for r in self.rows if r.id is not None]

    @property
    def label(self) -> str:
        ids = self.ids
        return f"#{ids[0]}" + (f"+{len(ids) - 1}" if len(ids) > 1 else "") if ids else "#?"

    @property
    def first(self) -> RunRecord:
        return self.rows[0]


def points_of(rows: list[RunRecord]) -> list[Point]:
    """The points of one series' rows (oldest first)."""
    jobs: list[list[RunRecord]] = []
    open_jobs: dict[str, list[RunRecord]] = {}
    for r in rows:
        group = open_jobs.get(r.job) if r.job and r.rank is not None else None
        if group is not None and r.recorded_at - group[0].recorded_at <= JOB_WINDOW_S:
            group.append(r)
            continue
        jobs.append([r])
        if r.job:
            open_jobs[r.job] = jobs[-1]
    return [point_of(group) for group in jobs]


def point_of(rows: list[RunRecord]) -> Point:
    """Steps pooled over the rows (their median, else the median of the rows' medians);
    throughput summed, as each rank reports its own."""
    steps = [t for r in rows for t in r.step_times_ms]
    medians = [r.step_ms_median for r in rows if r.step_ms_median is not None]
    median = float(np.median(steps)) if steps else (float(np.median(medians)) if medians else None)
    rates = [r.samples_per_s for r in rows]
    known = [x for x in rates if x is not None]
    rate = float(sum(known)) if known and len(known) == len(rates) else None
    first = rows[0]
    per_step = round(first.samples_per_step, 1) if first.samples_per_step else None
    return Point(rows, median, steps, rate, (first.world_size, first.devices, per_step))
