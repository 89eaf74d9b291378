"""The pipeline section's renderers (a job section, docs/parallelism.md): each stage's compute
and waits, in text, HTML and Markdown. HTML cells are escaped by the template; every trace
string in the Markdown goes through md_text."""

from __future__ import annotations

from rich.table import Table as RichTable

from trainprof.analysis.parallelism.pipeline import Pipeline
from trainprof.formatting import number
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.markdown.text import md_text, table
from trainprof.report.quantities import compact_table, pct
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext


def text(result: Pipeline, ctx: ViewContext) -> RichTable | None:
    """The stages' table, titled with the schedule, the ideal bubble and the heaviest stage."""
    if not result.stages:
        return None
    bubble = result.ideal_bubble_pct
    heavy = result.heaviest
    title = (f"Pipeline: {len(result.stages)} stages, {result.micro_batches or '?'} "
             f"micro-batches ({result.schedule or 'schedule unknown'}); ideal bubble "
             f"{pct(bubble)}")
    if heavy is not None:
        title += (f"; stage {heavy.stage} computes {result.imbalance_pct:.0f}% over the mean "
                  f"(balanced saves {result.imbalance_saving_ms:.1f} ms/step)")
    t = compact_table(title)
    for col in ("stage", "rank", "compute ms", "step ms", "waiting ms", "warm-up", "steady",
                "cool-down", "idle", ""):
        t.add_column(col, justify="left" if col in ("stage", "") else "right")
    for s in result.stages:
        t.add_row(f"{s.stage}", f"{s.rank}", f"{s.compute_ms:.1f}", f"{s.step_ms:.1f}",
                  f"{s.waiting_ms:.1f}", *(f"{x:.1f}" for x in s.phases_ms), pct(s.idle_pct),
                  "heaviest" if s is heavy else "")
    return t


def html(result: Pipeline | None, ctx: ViewContext) -> list[HtmlBlock]:
    """The stages' table under its heading, or nothing when there are no stages."""
    rows = _stages_table(result)
    return [HtmlBlock("Pipeline stages", [rows])] if rows else []


def _stages_table(pipe: Pipeline | None) -> Table | None:
    stages = pipe.stages if pipe is not None else []
    if pipe is None or not stages:
        return None
    cols = [Column("stage"), Column("rank"), Column("compute ms", title="per step (median)"),
            Column("step ms"), Column("waiting ms", title="send/recv with no compute running"),
            Column("warm-up", title="waiting until the first forward micro-batch ends"),
            Column("steady", title="waiting between warm-up and cool-down"),
            Column("cool-down", title="waiting from the start of the last backward micro-batch"),
            Column("idle", title="share of the step the stage does not compute")]
    caption = (f"{pipe.micro_batches or '?'} micro-batches "
               f"({pipe.schedule or 'schedule unknown'}); ideal bubble "
               f"{_pct(pipe.ideal_bubble_pct)}; balanced stages save "
               f"{pipe.imbalance_saving_ms:.1f} ms per step")
    table = Table(cols, caption=caption)
    table.rows = [[num(s.stage, 0), num(s.rank, 0), num(s.compute_ms, 1), num(s.step_ms, 1),
                   num(s.waiting_ms, 1), num(s.warmup_wait_ms, 1), num(s.steady_wait_ms, 1),
                   num(s.cooldown_wait_ms, 1), num(s.idle_pct, 1, "%")]
                  for s in stages]
    return table


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def markdown(pipeline: Pipeline | None, ctx: ViewContext) -> str:
    """The schedule and the stages' table, or "" when there are no stages."""
    if pipeline is None or not pipeline.stages:
        return ""
    out = [f"Pipeline: {len(pipeline.stages)} stages, "
           f"{pipeline.micro_batches or '?'} micro-batches "
           f"({md_text(pipeline.schedule or 'schedule unknown')}), ideal bubble "
           f"{number(pipeline.ideal_bubble_pct, 1, '%')}, balanced stages save "
           f"{number(pipeline.imbalance_saving_ms, 1)} ms per step", ""]
    rows = [[str(s.stage), str(s.rank), number(s.compute_ms, 1), number(s.step_ms, 1),
             number(s.waiting_ms, 1), number(s.warmup_wait_ms, 1),
             number(s.steady_wait_ms, 1), number(s.cooldown_wait_ms, 1),
             number(s.idle_pct, 1, "%")] for s in pipeline.stages]
    out += [table(["stage", "rank", "compute ms", "step ms", "waiting ms", "warm-up",
                   "steady", "cool-down", "idle"], rows, "rrrrrrrrr"), ""]
    return "\n".join(out).rstrip()


VIEW = SectionView("pipeline", "job", text=text, html=html, markdown=markdown,
                   markdown_heading="Parallelism")
