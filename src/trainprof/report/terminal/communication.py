"""Terminal views of the communication section (per rank) and the straggler section (job)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from trainprof.analysis.job.rank_table import shown_rows
from trainprof.analysis.job.stragglers import Stragglers
from trainprof.analysis.sections.communication import Communication
from trainprof.report.quantities import compact_table, ms, pct, size


def render_communication(result: Communication) -> Table | None:
    if not result.types:
        return None
    where = "kernels" if result.source == "kernels" else "host ranges"
    t = compact_table(f"Communication ({result.backend or 'backend unknown'}, from {where}; "
                      f"hidden by compute {pct(result.overlap_pct)})")
    for col in ("collective", "per step", "size/step", "ms/step", "exposed ms", "overlap"):
        t.add_column(col, justify="left" if col == "collective" else "right")
    n = max(result.steps, 1)
    for row in result.types:
        t.add_row(row.type, f"{row.count_per_step(n):.1f}",
                  size(None if row.bytes is None else row.bytes / n),
                  ms(row.busy_ms_per_step(n)), ms(row.exposed_us / n / 1e3), pct(row.overlap_pct))
    return t


def render_stragglers(result: Stragglers, all_ranks: bool = False) -> Group | None:
    """The per-rank waiting table (every rank's row with ``all_ranks``)."""
    if not result.ranks:
        return None
    spread = pct(result.step_spread_pct)
    t = compact_table(f"Ranks: step-time spread {spread}; waiting in {result.matched} matched "
                    "collectives")
    for col in ("rank", "step ms", "comm ms", "waited ms", "last in", "made others wait ms",
                "skew ms", "transfer ms"):
        t.add_column(col, justify="right")
    shown = shown_rows(result.ranks, keep=(result.straggler,), by="step_median_ms",
                       all_ranks=all_ranks)
    if len(shown) < len(result.ranks):
        t.caption = (f"{len(shown)} of {len(result.ranks)} ranks: the slowest, the fastest and "
                     "the straggler; --all-ranks shows all")
        t.caption_justify = "left"
    for r in shown:
        mark = " ◀" if r.rank == result.straggler else ""
        t.add_row(f"{r.rank}{mark}", ms(r.step_median_ms, 1), ms(r.comm_ms_per_step),
                  ms(r.waited_ms_per_step), str(r.last_arrivals),
                  ms(r.caused_wait_ms_per_step), ms(r.skew_ms_per_step),
                  ms(r.transfer_ms_per_step))
    parts: list = [t]
    if result.arrival:
        parts.append(Text(result.arrival, style="dim"))
    if result.straggler is not None:
        because = "" if result.cause is None else f", held back by {result.cause.label}"
        parts.append(Text(f"Straggler: rank {result.straggler}{because}", style="bold red"))
        parts += [Text(f"  {e}", style="dim") for e in result.evidence]
    parts += [Text(f"note: {n}", style="yellow") for n in result.notes]
    return Group(*parts)
