"""The stragglers section's renderers (a job section): who waits for whom, per rank (the
slowest, the fastest and the straggler unless ``--all-ranks``). HTML cells are escaped by the
template."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table as TextTable
from rich.text import Text

from trainprof.analysis.job.rank_table import shown_rows
from trainprof.analysis.job.stragglers import Stragglers
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.quantities import compact_table, ms, pct
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext


def text(result: Stragglers, ctx: ViewContext) -> Group | None:
    """The per-rank waiting table (every rank's row with ``ctx.all_ranks``)."""
    if not result.ranks:
        return None
    spread = pct(result.step_spread_pct)
    t = compact_table(f"Ranks: step-time spread {spread}; waiting in {result.matched} matched "
                    "collectives")
    for col in ("rank", "step ms", "comm ms", "waited ms", "last in", "made others wait ms",
                "skew ms", "transfer ms"):
        t.add_column(col, justify="right")
    shown = shown_rows(result.ranks, keep=(result.straggler,), by="step_median_ms",
                       all_ranks=ctx.all_ranks)
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
    parts: list[TextTable | Text] = [t]
    if result.arrival:
        parts.append(Text(result.arrival, style="dim"))
    if result.straggler is not None:
        because = "" if result.cause is None else f", held back by {result.cause.label}"
        parts.append(Text(f"Straggler: rank {result.straggler}{because}", style="bold red"))
        parts += [Text(f"  {e}", style="dim") for e in result.evidence]
    parts += [Text(f"note: {n}", style="yellow") for n in result.notes]
    return Group(*parts)


def stragglers_table(section: Stragglers | None, all_ranks: bool = False) -> Table | None:
    """Per rank: step time, communication, and the waiting it suffered and caused (every
    rank's row with ``all_ranks``, else the slowest, the fastest and the straggler)."""
    ranks = [] if section is None else section.ranks
    if section is None or len(ranks) < 2:
        return None
    cols = [Column("rank"), Column("median step ms"), Column("comm ms/step"),
            Column("exposed comm ms/step"), Column("waited ms/step"),
            Column("caused wait ms/step", title="time other ranks waited for this one"),
            Column("last to arrive", title="collectives this rank reached last"),
            Column("skew ms/step", title="waiting for the last rank to arrive (trace clocks)"),
            Column("transfer ms/step", title="from the last arrival to the end of its calls"),
            Column("caused skew ms/step",
                   title="the other ranks' wait for this one to arrive (trace clocks)")]
    out = Table(cols)
    shown = shown_rows(ranks, keep=(section.straggler,), by="step_median_ms",
                       all_ranks=all_ranks)
    if len(shown) < len(ranks):
        out.caption = (f"{len(shown)} of {len(ranks)} ranks: the slowest, the fastest and the "
                       "straggler; --all-ranks shows all.")
    for r in shown:
        out.rows.append([num(r.rank, 0), num(r.step_median_ms, 1),
                         num(r.comm_ms_per_step, 2),
                         num(r.exposed_comm_ms_per_step, 2),
                         num(r.waited_ms_per_step, 2),
                         num(r.caused_wait_ms_per_step, 2),
                         num(r.last_arrivals, 0),
                         num(r.skew_ms_per_step, 2),
                         num(r.transfer_ms_per_step, 2),
                         num(r.caused_skew_ms_per_step, 2)])
    if section.arrival:
        out.caption = " ".join(c for c in (out.caption, section.arrival) if c)
    return out


def html(result: Stragglers | None, ctx: ViewContext) -> list[HtmlBlock]:
    table = stragglers_table(result, ctx.all_ranks)
    return [HtmlBlock("Who waits for whom", [table])] if table else []


VIEW = SectionView("stragglers", "job", text=text, html=html)
