"""The per-rank table of a job: step time, phases, communication and idle time, one row per
rank (its windows pooled, weighted by their steps), with the slowest and fastest ranks marked.

Step time is the median of all the rank's steps (as the straggler analysis uses); phases and
communication are ms per step; idle is the GPU's idle share of the window on a GPU rank, and
on a CPU-only rank the share of step time no op covers (the breakdown's Other). Shown by
every report; in the JSON result under ``job.rank_table``. docs/distributed.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.job.rank_spread import Spread, rank_spreads
from trainprof.analysis.overview.phases import PHASES
from trainprof.structs import Record, asdict

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis

#: Rows a report shows; beyond that, half of them for the slowest ranks and half the fastest.
SHOWN_ROWS = 32


class RankRow(Record):
    rank: int
    windows: int
    steps: int
    step_ms: float  # median over all its steps
    phases_ms: dict[str, float]  # per step
    comm_ms: float | None  # communication per step (None: no communication section)
    exposed_comm_ms: float | None  # of which with no compute running
    idle_pct: float | None
    idle_of: str  # "GPU" (device idle) or "host" (no op running)
    mark: str  # "slowest", "fastest" or ""


class RankTable(Record):
    rows: list[RankRow]
    slowest: int | None  # rank, when the ranks differ
    fastest: int | None
    spread: dict[str, Spread] = field(default_factory=dict)  # analysis/job/rank_spread.py

    def to_pandas(self) -> Any:
        """One row per rank."""
        return data_frame([asdict(r) for r in self.rows])

    def shown(self, keep: tuple[int | None, ...] = (), all_ranks: bool = False
              ) -> list[RankRow]:
        """The rows a report shows (see ``shown_rows``)."""
        return shown_rows(self.rows, keep=keep, all_ranks=all_ranks)


def rank_table(ranks: list[RankAnalysis]) -> RankTable:
    """One row per rank, in rank order."""
    by_rank: dict[int, list[RankAnalysis]] = {}
    for r in ranks:
        by_rank.setdefault(r.rank, []).append(r)
    rows = [_row(k, windows) for k, windows in sorted(by_rank.items())]
    table = RankTable(rows=rows, slowest=None, fastest=None)
    timed = [r for r in rows if r.steps]
    if len(timed) > 1:
        slow = max(timed, key=lambda r: r.step_ms)
        fast = min(timed, key=lambda r: r.step_ms)
        if slow.step_ms > fast.step_ms:
            slow.mark, fast.mark = "slowest", "fastest"
            table.slowest, table.fastest = slow.rank, fast.rank
    table.spread = rank_spreads(rows)
    return table


def _row(rank: int, windows: list[RankAnalysis]) -> RankRow:
    counts = np.array([int(w.steps.count) for w in windows], dtype=np.float64)
    n = float(counts.sum())
    step_ms = [s["ms"] for w in windows for s in w.steps.per_step]

    def per_step(values: list[float]) -> float:
        return float(np.dot(values, counts) / n) if n else 0.0

    comms = [w.sections.communication for w in windows if w.sections.communication is not None]
    comm_steps = sum(c.steps for c in comms)
    on_gpu = [w.timeline for w in windows if w.timeline is not None]
    if on_gpu:
        span = sum(t.span_ms for t in on_gpu)
        idle = sum(t.idle_pct * t.span_ms for t in on_gpu) / span if span else None
    else:
        step_total = per_step([w.steps.mean_ms for w in windows])
        other = per_step([w.breakdown_ms.get("other", 0.0) for w in windows])
        idle = other / step_total * 100.0 if step_total > 0 else None
    return RankRow(
        rank=rank, windows=len(windows), steps=int(n),
        step_ms=float(np.median(step_ms)) if step_ms else 0.0,
        phases_ms={p: per_step([w.phases_ms.get(p, 0.0) for w in windows]) for p in PHASES},
        comm_ms=sum(c.busy_us for c in comms) / comm_steps / 1000.0 if comm_steps else None,
        exposed_comm_ms=(sum(c.exposed_us for c in comms) / comm_steps / 1000.0
                         if comm_steps else None),
        idle_pct=idle, idle_of="GPU" if on_gpu else "host", mark="",
    )


def shown_rows(rows: list[Any], limit: int | None = None, keep: tuple[int | None, ...] = (),
               by: str = "step_ms", all_ranks: bool = False) -> list[Any]:
    """``rows`` (``RankRow``s, or their dicts, or any rows with ``rank`` and ``by``), cut to the
    ``limit // 2`` slowest and fastest ranks by ``by`` when there are more than ``limit``
    (default ``SHOWN_ROWS``; every row with ``all_ranks``: ``--all-ranks``,
    ``AnalyzeOptions.all_ranks``), plus the ranks in ``keep`` (the straggler), in their order."""
    if limit is None:
        limit = len(rows) if all_ranks else SHOWN_ROWS
    if len(rows) <= limit:
        return list(rows)

    def field(i: int, name: str) -> Any:
        return rows[i][name] if isinstance(rows[i], dict) else getattr(rows[i], name)

    by_time = sorted(range(len(rows)), key=lambda i: field(i, by) or 0.0)
    chosen = set(by_time[: limit // 2]) | set(by_time[-(limit // 2):])
    chosen |= {i for i in range(len(rows)) if field(i, "rank") in keep}
    return [r for i, r in enumerate(rows) if i in chosen]


def mark_straggler(table: RankTable | None, straggler: int | None) -> None:
    """A straggler is never also marked "fastest": its own steps are short because the other
    ranks wait for it in the collectives, so "fastest" would contradict the straggler mark.
    The mark goes (and ``fastest`` becomes None); "slowest" beside "straggler" agrees."""
    if table is None or straggler is None or table.fastest != straggler:
        return
    for row in table.rows:
        if row.rank == straggler and row.mark == "fastest":
            row.mark = ""
    table.fastest = None
