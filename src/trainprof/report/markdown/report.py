"""Markdown for a pull-request comment: the findings, the overview and the top ops.

Every string from a trace goes through ``md_text`` (table cells) or ``code_block`` (fenced
code): Markdown punctuation is backslash-escaped, ``<``, ``>`` and ``&`` become entities, and
line breaks become spaces, so a name cannot break a table, open a link or inject HTML.
"""

from __future__ import annotations

from typing import Any

from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.job.rank_table import RankTable, shown_rows
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import Finding, shared_number, typed_findings, where_text
from trainprof.formatting import counted, number
from trainprof.report.labels import category_label, evidence_text
from trainprof.report.markdown.text import MAX_CELL, code_block, md_text, table
from trainprof.report.sections.registry import MARKDOWN_OUTLINE, VIEWS
from trainprof.report.sections.view import ViewContext
from trainprof.vocabulary import PHASES

__all__ = ["MAX_CELL", "code_block", "md_text", "table", "to_markdown"]
from trainprof.report.terminal.rank_spread import SPREAD_HEAD, spread_rows, spread_shown

#: Rows of the operator and kernel tables.
TOP_ROWS = 10


_f = number


def findings_md(findings: list[Finding]) -> str:
    if not findings:
        return "**No major bottleneck found.** Where the time goes is below."
    rows = []
    for i, f in enumerate(findings, 1):
        where = "job" if f.rank is None else where_text(f.rank, f.extra)
        shared = shared_number(f, findings)
        saves = (f"{_f(f.reported_saving_pct, 0)}% ({_f(f.reported_saving_ms, 1)} ms)"
                 if shared is None else f"the same time as finding {shared}")
        rows.append([str(i), md_text(f.severity), md_text(f.title, None), where, saves,
                     md_text(f.fix.summary, None)])
    out = [table(["#", "severity", "finding", "where", "saves/step", "fix"], rows, "rllrrl"), ""]
    out.append("<details><summary>Evidence and fixes</summary>\n")
    for i, f in enumerate(findings, 1):
        out.append(f"**{i}. {md_text(f.title, None)}**\n")
        out.append(md_text(f.explanation, None) + "\n")
        out += [f"- {md_text(evidence_text(e), None)}" for e in f.evidence]
        if f.saving_assumption:
            out.append(f"- saving estimate: {md_text(f.saving_assumption, None)}")
        for label, snippet in (("PyTorch", f.fix.pytorch), ("accelerate", f.fix.accelerate)):
            if snippet:
                out.append(f"\n{label}:\n")
                out.append(code_block(snippet))
        out.append("")
    out.append("</details>")
    return "\n".join(out)


def overview_md(r: RankAnalysis) -> str:
    s, gpu, tl = r.steps, r.gpu, r.timeline
    facts = [["median step", f"{_f(s.median_ms)} ms ({counted(s.count, 'step')}, "
              f"{md_text(r.step_source)})"],
             ["step-to-step variation (CV)", f"{_f(s.cv * 100)}%"]]
    if gpu is not None:
        facts.append(["GPU utilisation", f"{_f(gpu.utilization_pct)}%"])
    if tl is not None:
        facts.append(["GPU idle / exposed communication",
                      f"{_f(tl.idle_pct)}% / {_f(tl.exposed_communication_pct)}%"])
    out = [table(["", "value"], facts, "ll"), ""]
    rows = [[category_label(c), _f(r.breakdown_ms.get(c), 2), _f(pct, 1, "%")]
            for c, pct in r.breakdown_pct.items() if pct >= 0.05]
    out += [table(["category", "ms/step", "share"], rows), ""]
    rows = [[p, _f(r.phases_ms.get(p), 2), _f(pct, 1, "%")] for p, pct in r.phases_pct.items()]
    out.append(table(["phase", "ms/step", "share"], rows))
    return "\n".join(out)


def ranks_md(rank_table: RankTable, straggler: int | None = None, all_ranks: bool = False
             ) -> str:
    """The per-rank table (analysis/job/rank_table.py), slowest, fastest and straggler marked
    (every rank's row with ``all_ranks``)."""
    rows = []
    shown = shown_rows(rank_table.rows, keep=(straggler,), all_ranks=all_ranks)
    for r in shown:
        mark = " ".join(m for m in (r.mark, "straggler" * (r.rank == straggler)) if m)
        idle = "n/a" if r.idle_pct is None else (
            f"{r.idle_pct:.0f}%" + ("" if r.idle_of == "GPU" else " (host)"))
        rows.append([str(r.rank), _f(r.step_ms), *(_f(r.phases_ms.get(p)) for p in PHASES),
                     _f(r.comm_ms), _f(r.exposed_comm_ms), idle, f"**{mark}**" if mark else ""])
    head = ["rank", "step ms", *PHASES, "comm", "exposed comm", "idle", ""]
    out = table(head, rows, "r" * 10 + "l")
    if len(shown) < len(rank_table.rows):
        out += (f"\n\n{len(shown)} of {len(rank_table.rows)} ranks: the slowest, the "
                "fastest and any straggler; `--all-ranks` shows all, as the JSON result has.")
    if spread_shown(rank_table):
        out += (f"\n\n**How the {len(rank_table.rows)} ranks spread**\n\n"
                + table(SPREAD_HEAD, [[md_text(c, None) if i in (0, 7) else c
                                       for i, c in enumerate(row)]
                                      for row in spread_rows(rank_table.spread)],
                        "lrrrrrll"))
    return out


def to_markdown(result: Analysis | dict[str, Any], top: int | None = None,
                modules: bool | None = None) -> str:
    """The whole comment: verdict, findings, then the slowest rank's overview and top ops
    (``result``: an analysis, or a saved result's JSON, read into the same records). ``top``
    rows per table, the module tree and every rank's row as ``analysis.options`` ask (a
    saved result's JSON: the defaults); ``top`` and ``modules`` override them."""
    analysis = result if isinstance(result, Analysis) else analysis_from_dict(result)
    options = analysis.options
    top = options.top if top is None else top
    modules = options.modules if modules is None else modules
    ranks = analysis.ranks
    slowest = max(ranks, key=lambda r: r.steps.median_ms or 0)
    where = f"rank {slowest.rank}" + (f" (slowest of {len(ranks)})" if len(ranks) > 1 else "")
    out = [f"## trainprof: {md_text(analysis.source or slowest.path.name, None)}", "",
           f"{counted(len(ranks), 'rank or window', 'ranks or windows')} · "
           f"{md_text(slowest.device)}", "",
           "### Findings", "", findings_md(typed_findings(analysis.findings)), ""]
    job = analysis.job
    if job.rank_table is not None and len(job.rank_table.rows) > 1:
        straggler = job.stragglers.straggler if job.stragglers is not None else None
        out += ["### Ranks (ms per step)", "",
                ranks_md(job.rank_table, straggler, options.all_ranks), ""]
        arrival = job.stragglers.arrival if job.stragglers is not None else None
        if arrival:
            out += [md_text(arrival, None), ""]
    out += [f"### Overview: {where}", "", overview_md(slowest), ""]
    for heading, piece in section_pieces(analysis, slowest, top, modules):
        out += [f"### {heading}", "", piece, ""]
    notes = [*slowest.notes, *analysis.notes]
    out += [f"> Note: {md_text(n, None)}" for n in notes]
    return "\n".join(out).rstrip() + "\n"


def section_pieces(analysis: Analysis, rank: RankAnalysis, top: int = TOP_ROWS,
                   modules: bool = False) -> list[tuple[str, str]]:
    """(heading, text) of each part of the comment after the overview: the pieces of the
    sections' views (report/sections/registry.py) of ``rank`` and of the job, gathered under
    their headings in MARKDOWN_OUTLINE's order."""
    all_ranks = analysis.options.all_ranks
    rank_context = ViewContext(rank=rank, analysis=analysis, rows=top, modules=modules,
                               all_ranks=all_ranks)
    job_context = ViewContext(analysis=analysis, rows=top, modules=modules, all_ranks=all_ranks)
    pieces: dict[str, list[str]] = {heading: [] for heading in MARKDOWN_OUTLINE}
    for view in VIEWS:
        if view.markdown is None or view.markdown_heading is None:
            continue
        result = getattr(rank.sections if view.level == "rank" else analysis.job, view.name)
        text = view.markdown(result, rank_context if view.level == "rank" else job_context)
        if text:
            pieces[view.markdown_heading].append(text)
    return [(heading, "\n\n".join(texts)) for heading, texts in pieces.items() if texts]
