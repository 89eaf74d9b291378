"""The experts section's renderers (a job section, docs/parallelism.md): the all-to-all across
the expert ranks, in text, HTML and Markdown. HTML cells are escaped by the template; every
trace string in the Markdown goes through md_text."""

from __future__ import annotations

from rich.table import Table as RichTable

from trainprof.analysis.parallelism.expert import ExpertBalance
from trainprof.formatting import number
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.markdown.text import md_text, table
from trainprof.report.quantities import add_number_columns, compact_table, pct
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext


def text(result: ExpertBalance, ctx: ViewContext) -> RichTable | None:
    """Each expert rank's all-to-all, titled with the slowest and the overloaded rank."""
    if not result.ranks:
        return None
    slow, heavy = result.slowest, result.overloaded
    title = f"Expert parallelism: all-to-all, {pct(result.hidden_pct)} beside compute"
    if slow is not None and heavy is not None:
        title += (f"; rank {slow.rank} waits {result.imbalance_ms:.1f} ms/step over the mean "
                  f"({pct(result.imbalance_pct)} of the step), rank {heavy.rank} overloaded")
    t = compact_table(title)
    if result.notes:
        t.caption, t.caption_justify = " ".join(result.notes), "left"
    t.add_column("rank")
    add_number_columns(t, "all-to-all ms/step", "exposed ms/step", "hidden", "step ms")
    for r in result.ranks:
        t.add_row(str(r.rank), f"{r.all_to_all_ms:.2f}", f"{r.exposed_ms:.2f}",
                  pct(r.hidden_pct), f"{r.step_ms:.1f}")
    return t


def html(result: ExpertBalance | None, ctx: ViewContext) -> list[HtmlBlock]:
    """The ranks' table under its heading, or nothing when there are no expert ranks."""
    rows = _ranks_table(result)
    return [HtmlBlock("Expert parallelism: all-to-all per rank", [rows])] if rows else []


def _ranks_table(experts: ExpertBalance | None) -> Table | None:
    if experts is None or not experts.ranks:
        return None
    cols = [Column("rank"), Column("all-to-all ms/step"),
            Column("exposed ms/step", title="with no compute running beside"),
            Column("hidden", title="share of the all-to-all beside compute"), Column("step ms")]
    caption = (f"The slowest rank waits {experts.imbalance_ms:.1f} ms per step over the mean "
               f"({experts.imbalance_pct:.1f}% of the step). " + " ".join(experts.notes))
    table = Table(cols, caption=caption.strip())
    table.rows = [[num(r.rank, 0), num(r.all_to_all_ms, 2), num(r.exposed_ms, 2),
                   num(r.hidden_pct, 1, "%"), num(r.step_ms, 1)] for r in experts.ranks]
    return table


def markdown(experts: ExpertBalance | None, ctx: ViewContext) -> str:
    """The ranks' all-to-all and the analysis's notes, or "" when there are no expert ranks."""
    if experts is None or not experts.ranks:
        return ""
    out = [f"Expert parallelism: all-to-all {number(experts.hidden_pct, 1, '%')} beside "
           f"compute; the slowest rank waits {number(experts.imbalance_ms, 1)} "
           f"ms per step over the mean ({number(experts.imbalance_pct, 1, '%')} of the "
           "step)", ""]
    rows = [[str(r.rank), number(r.all_to_all_ms, 2), number(r.exposed_ms, 2),
             number(r.hidden_pct, 1, "%")] for r in experts.ranks]
    out += [table(["rank", "all-to-all ms/step", "exposed ms/step", "hidden"], rows,
                  "rrrr"), ""]
    out += [f"> {md_text(n, None)}" for n in experts.notes]
    return "\n".join(out).rstrip()


VIEW = SectionView("experts", "job", text=text, html=html, markdown=markdown,
                   markdown_heading="Parallelism")
