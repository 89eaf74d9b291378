"""Each rank's collective bus bandwidth side by side (a job section): the rank whose link is
slow stands out. Per rank, over its sized collectives (analysis/roofline/collectives.py):
busbw = Σ bus bytes / Σ time, and the time-weighted % of its link peak. docs/roofline.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.structs import Derived, Record

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis


class RankBandwidth(Record):
    rank: int
    window: int
    calls: int
    time_us: float
    busbw_gb_s: float
    pct_of_peak: float | None


class CollectiveRanks(Record):
    json_derived = (Derived("slowest_rank", "rows"),)

    rows: list[RankBandwidth] = field(default_factory=list)  # by rank and window

    @property
    def slowest(self) -> RankBandwidth | None:
        return min(self.rows, key=lambda r: (r.busbw_gb_s, r.rank)) if self.rows else None

    @property
    def slowest_rank(self) -> int | None:
        slow = self.slowest
        return None if slow is None else slow.rank

    def to_pandas(self) -> Any:
        """One row per rank and window."""
        return data_frame([r.to_dict() for r in self.rows])


def collective_ranks(ranks: list[RankAnalysis]) -> CollectiveRanks:
    """One row per rank and window that has sized collectives."""
    out = []
    for r in ranks:
        c = r.sections.collectives
        rows = c.rows if c is not None else []
        time_us = sum(x.time_us for x in rows)
        if not rows or time_us <= 0:
            continue
        peaked = [x for x in rows if x.pct_of_peak is not None]
        peaked_us = sum(x.time_us for x in peaked)
        out.append(RankBandwidth(
            rank=r.rank, window=r.window, calls=sum(x.count for x in rows), time_us=time_us,
            busbw_gb_s=sum(x.busbw_gb_s * x.time_us for x in rows) / time_us,
            pct_of_peak=(sum((x.pct_of_peak or 0.0) * x.time_us for x in peaked) / peaked_us
                         if peaked_us > 0 else None)))
    out.sort(key=lambda x: (x.rank, x.window))
    return CollectiveRanks(out)
