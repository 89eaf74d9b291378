"""The HTML report's content as plain data: the verdict, each rank's figures and charts.

Everything here reads the result's typed records (a saved result is read back into the same
records: analysis/decode.py), so a saved result renders the same as a fresh analysis. Strings
stay plain ``str`` (the template escapes them); charts are ``Markup`` from ``report.html.svg``,
which escapes its own text.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.overview.gpu import GpuFigures
from trainprof.analysis.overview.timeline import Timeline
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import SLOWEST_RANK, Finding, is_minor, saving_phrase, where_text
from trainprof.report.html import svg, tables
from trainprof.report.html.chart import Chart
from trainprof.report.html.tables import Table, fmt
from trainprof.report.labels import (
    CATEGORY_COLORS,
    PHASE_COLORS,
    TENSOR_CORE_OF_COMPUTE,
    TENSOR_CORE_OF_COMPUTE_NOTE,
    TIMELINE_SHARES,
    category_label,
    evidence_text,
)
from trainprof.report.sections.registry import VIEWS
from trainprof.report.sections.view import HtmlBlock, ViewContext

#: Most bars in the per-step chart; longer runs get a bar per group of consecutive steps.
MAX_STEP_BARS = 150


class RankView(msgspec.Struct):
    anchor: str
    title: str
    facts: list[tuple[str, str]]
    step_chart: Chart
    breakdown: Chart
    breakdown_table: Table
    phases: Chart
    phases_table: Table
    gpu_table: Table | None
    timeline: Chart | None
    timeline_table: Table | None
    #: The sections' parts of the page, in the order of report/sections/registry.py.
    sections: list[HtmlBlock] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


#: Findings shown open in the HTML verdict; the rest (and minor ones, diagnose.findings.is_minor)
#: are folded to their title line, so that the first chart is not two screens down.
OPEN_FINDINGS = 3


def finding_view(f: Finding, number: int, shared: int | None = None) -> dict[str, Any]:
    """One finding's card; ``shared``: the number of the finding whose saving it shares."""
    from markupsafe import Markup

    from trainprof.report.html.rule_docs import rule_section_html

    saving_pct, saving_ms = f.reported_saving_pct, f.reported_saving_ms
    docs_html = rule_section_html(f.docs)
    return {
        # The costliest findings open; one that saves too little for a card (is_minor, as the
        # text report decides) or past OPEN_FINDINGS folded to its title line.
        "open": number <= OPEN_FINDINGS and not is_minor(saving_pct, f.severity),
        # Our own docs/rules.md rendered with raw HTML escaped (report/html/rule_docs.py).
        "docs_html": Markup(docs_html) if docs_html else None,
        "number": number,
        "severity": f.severity,
        "title": f.title,
        "where": "whole job" if f.rank is None else where_text(f.rank, f.extra),
        "saving": saving_phrase(saving_pct, saving_ms, shared),
        "explanation": f.explanation,
        "evidence": [evidence_text(e) for e in f.evidence],
        "assumption": f.saving_assumption,
        "fix": {"summary": f.fix.summary, "pytorch": f.fix.pytorch or "",
                "accelerate": f.fix.accelerate or ""},
        "docs": f.docs,
        "minor": is_minor(saving_pct, f.severity),
    }


def headline(findings: list[Finding]) -> str:
    if not findings:
        return "No major bottleneck found. Where the time goes is below."
    top = findings[0]
    more = f" ({len(findings)} findings, most costly first)" if len(findings) > 1 else ""
    where = (f" on {where_text(top.rank, top.extra)}"
             if top.rank is not None and top.extra.get(SLOWEST_RANK) is not None else "")
    return (f"{top.title}: fixing it saves ~{fmt(top.reported_saving_pct, 0)}% of step "
            f"time{where}{more}.")


def rank_view(rank: RankAnalysis, index: int, rows: int) -> RankView:
    """One rank's part of the page (the ``index``-th rank), ``rows`` per table."""
    steps, gpu = rank.steps, rank.gpu
    window = f", window {rank.window}" if rank.window else ""
    facts = [("steps", f"{steps.count} (from {rank.step_source})"),
             ("median step", f"{fmt(steps.median_ms, 1)} ms"),
             ("mean", f"{fmt(steps.mean_ms, 1)} ms"), ("p90", f"{fmt(steps.p90_ms, 1)} ms"),
             ("min / max", f"{fmt(steps.min_ms, 1)} / {fmt(steps.max_ms, 1)} ms"),
             ("step-to-step variation (CV)", f"{fmt(steps.cv * 100, 1)}%")]
    if gpu is not None:
        facts.append(("GPU utilisation", f"{fmt(gpu.utilization_pct, 1)}%"))
    return RankView(
        anchor=f"rank-{index}",
        title=f"rank {rank.rank}{window} · {rank.device} · {rank.path.name}",
        facts=facts,
        step_chart=step_chart(rank, step_breakdowns(rank)),
        breakdown=_share_chart(
            [(category_label(c), pct, CATEGORY_COLORS.get(c, "#999"))
             for c, pct in rank.breakdown_pct.items()], "Share of step time by category"),
        breakdown_table=_share_table("category", rank.breakdown_ms, rank.breakdown_pct,
                                     category_label),
        phases=_share_chart([(p, pct, PHASE_COLORS.get(p, "#999"))
                             for p, pct in rank.phases_pct.items()],
                            "Share of step time by training phase"),
        phases_table=_share_table("phase", rank.phases_ms, rank.phases_pct, str),
        gpu_table=_gpu_table(rank.gpus),
        timeline=_timeline_chart(rank.timeline),
        timeline_table=_timeline_table(rank.timeline),
        sections=section_blocks(rank, rows),
        notes=list(rank.notes),
    )


def section_blocks(rank: RankAnalysis, rows: int) -> list[HtmlBlock]:
    """The rank's sections' parts of the page (report/sections/registry.py)."""
    context = ViewContext(rank=rank, rows=rows)
    return [block for view in VIEWS if view.level == "rank" and view.html is not None
            for block in view.html(getattr(rank.sections, view.name), context)]


def job_blocks(analysis: Analysis, rows: int, all_ranks: bool = False) -> list[HtmlBlock]:
    """The job sections' parts of the page, shown with the ranks side by side (every rank's
    row with ``all_ranks``)."""
    context = ViewContext(analysis=analysis, rows=rows, all_ranks=all_ranks)
    return [block for view in VIEWS if view.level == "job" and view.html is not None
            for block in view.html(getattr(analysis.job, view.name), context)]


def step_breakdowns(rank: RankAnalysis) -> list[dict[str, float]] | None:
    """Each step's ms per category, or None when a step lacks it (``trainprof report`` adds it
    to the steps of its input: commands/report.py add_step_breakdown)."""
    per_step = rank.steps.per_step
    found = [p.get("breakdown_ms") for p in per_step]
    return None if not per_step or None in found else [b for b in found if b is not None]


def step_chart(rank: RankAnalysis, breakdowns: list[dict[str, float]] | None = None) -> Chart:
    """Stacked bars of each step's breakdown (``step_breakdowns``), or the step times alone
    when it is unknown."""
    per_step = rank.steps.per_step
    labels = [str(p["step"]) for p in per_step]
    if breakdowns is not None and per_step:
        keys = list(breakdowns[0])
        series = [svg.Series(category_label(c), CATEGORY_COLORS.get(c, "#999")) for c in keys]
        values = [[b.get(c, 0.0) for c in keys] for b in breakdowns]
        caption = "Each step's time by category (the same priority order as the table)."
    else:
        series = [svg.Series("step time", CATEGORY_COLORS["kernel"])]
        values = [[p["ms"]] for p in per_step]
        caption = "Each step's time (the per-step breakdown is not in a saved result)."
    size = math.ceil(len(values) / MAX_STEP_BARS)
    if size > 1:  # a bar per group of consecutive steps: the file stays small, bars stay visible
        labels = ["–".join(dict.fromkeys((labels[i], labels[min(i + size, len(labels)) - 1])))
                  for i in range(0, len(labels), size)]
        values = [np.mean(values[i:i + size], axis=0).tolist()
                  for i in range(0, len(values), size)]
        caption += f" Each bar is the mean of {size} consecutive steps ({len(per_step)} in all)."
    chart = svg.stacked_bars(labels, series, values, "ms", "Step time per step", "step")
    return Chart(chart, svg.legend(series), caption)


def ranks_chart(ranks: list[RankAnalysis]) -> Chart:
    """Mean step time per rank, stacked by category."""
    keys = list(ranks[0].breakdown_ms)
    series = [svg.Series(category_label(c), CATEGORY_COLORS.get(c, "#999")) for c in keys]
    labels = [f"{r.rank}" + (f" w{r.window}" if r.window else "") for r in ranks]
    values = [[r.breakdown_ms.get(c, 0.0) for c in keys] for r in ranks]
    chart = svg.stacked_bars(labels, series, values, "ms", "Mean step time per rank", "rank")
    caption = "Mean step time per rank, by category" + (
        " (w1, w2: the rank's second, third recorded window)." if any(r.window for r in ranks) else ".")
    return Chart(chart, svg.legend(series), caption)


def ranks_table(ranks: list[RankAnalysis], straggler: int | None = None) -> Table:
    """Each rank's step, breakdown shares and GPU figures; the straggler, the slowest and the
    fastest marked (the verdict names them)."""
    medians = [r.steps.median_ms or 0.0 for r in ranks]
    marks = {medians.index(max(medians)): "slowest", medians.index(min(medians)): "fastest"}
    cols = [tables.Column("rank"), tables.Column("window"), tables.Column("device", False),
            tables.Column("median step ms"), tables.Column("kernel"),
            tables.Column("communication"), tables.Column("DataLoader"),
            tables.Column("CPU Exec"), tables.Column("GPU util"), tables.Column("exposed comm"),
            tables.Column("", False)]
    table = Table(cols)
    for i, r in enumerate(ranks):
        mark = ", ".join(m for m in ("straggler" * (r.rank == straggler),
                                     marks.get(i, "") * (len(set(medians)) > 1)) if m)
        b, gpu, tl = r.breakdown_pct, r.gpu, r.timeline  # b: % by category (analysis.overview)
        table.rows.append([
            tables.num(r.rank, 0), tables.num(r.window, 0), tables.text(r.device),
            tables.num(r.steps.median_ms, 1), tables.num(b.get("kernel"), 0, "%"),
            tables.num(b.get("communication"), 0, "%"), tables.num(b.get("dataloader"), 0, "%"),
            tables.num(b.get("cpu_exec"), 0, "%"),
            tables.num(None if gpu is None else gpu.utilization_pct, 0, "%"),
            tables.num(None if tl is None else tl.exposed_communication_pct, 0, "%"),
            tables.text(mark),
        ])
    return table


def _share_chart(items: list[tuple[str, float, str]], label: str) -> Chart:
    series = [(svg.Series(name, color), pct) for name, pct, color in items]
    return Chart(svg.share_bar(series, label), svg.legend([s for s, _ in series]))


def _share_table(what: str, ms: dict[str, float], pct: dict[str, float],
                 label: Callable[[str], str]) -> Table:
    table = Table([tables.Column(what, False), tables.Column("ms/step"), tables.Column("share")])
    for key in pct:
        table.rows.append([tables.text(label(key)), tables.num(ms.get(key), 2),
                           tables.num(pct.get(key), 1, "%")])
    return table


def _gpu_table(gpus: list[GpuFigures]) -> Table | None:
    if not gpus:
        return None
    cols = [tables.Column("device"), tables.Column("utilisation"),
            tables.Column("SM efficiency", title="estimated from launch sizes"),
            tables.Column("occupancy", title="estimated from launch sizes"),
            tables.Column(TENSOR_CORE_OF_COMPUTE, title=TENSOR_CORE_OF_COMPUTE_NOTE)]
    table = Table(cols, sortable=False)
    for g in gpus:
        table.rows.append([tables.text(g.device), tables.num(g.utilization_pct, 1, "%"),
                           tables.num(g.sm_efficiency_pct, 1, "%"),
                           tables.num(g.achieved_occupancy_pct, 1, "%"),
                           tables.num(g.tensor_core_pct, 1, "%")])
    return table


def _timeline_chart(tl: Timeline | None) -> Chart | None:
    if tl is None:
        return None
    shares = {"compute_pct": tl.compute_pct,  # the figures TIMELINE_SHARES names
              "exposed_communication_pct": tl.exposed_communication_pct,
              "exposed_memcpy_pct": tl.exposed_memcpy_pct, "idle_pct": tl.idle_pct}
    items = [(label, shares[key] or 0.0, color) for key, label, color in TIMELINE_SHARES]
    chart = _share_chart(items, "GPU time over the step window")
    chart.caption = (f"{fmt(tl.span_ms, 1)} ms analysed: compute, communication not "
                     "under compute, copies under neither, and idle add up to 100%.")
    return chart


def _timeline_table(tl: Timeline | None) -> Table | None:
    if tl is None:
        return None
    rows = (("busy", tl.busy_pct), ("idle", tl.idle_pct), ("compute", tl.compute_pct),
            ("communication", tl.communication_pct),
            ("communication not under compute", tl.exposed_communication_pct),
            ("memcpy / memset", tl.memcpy_pct),
            ("copies not under other work", tl.exposed_memcpy_pct),
            ("communication hidden by compute", tl.comm_comp_overlap_pct))
    table = Table([tables.Column("", False), tables.Column("share")], sortable=False)
    for label, pct in rows:
        if pct is not None:
            table.rows.append([tables.text(label), tables.num(pct, 1, "%")])
    return table
