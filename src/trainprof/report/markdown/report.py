"""Markdown for a pull-request comment: the findings, the overview and the top ops.

Every string from a trace goes through ``md_text`` (table cells) or ``code_block`` (fenced
code): Markdown punctuation is backslash-escaped, ``<``, ``>`` and ``&`` become entities, and
line breaks become spaces, so a name cannot break a table, open a link or inject HTML.
"""

from __future__ import annotations

from typing import Any

from trainprof.analysis.critical_path.result import CriticalPath
from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.job.collective_ranks import CollectiveRanks
from trainprof.analysis.job.rank_table import RankTable, shown_rows
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.analysis.sections.kernel_shares import KernelClassShares
from trainprof.diagnose.findings import Finding, shared_number, typed_findings, where_text
from trainprof.formatting import counted, number
from trainprof.report.labels import category_label, evidence_text
from trainprof.report.markdown.model_parallel import model_parallel_md
from trainprof.report.markdown.modules import modules_md
from trainprof.report.markdown.parallelism import parallelism_md
from trainprof.report.markdown.text import MAX_CELL, code_block, md_text, table
from trainprof.report.names import short_name as short_kernel_name
from trainprof.vocabulary import PHASES

__all__ = ["MAX_CELL", "code_block", "md_text", "table", "to_markdown"]
from trainprof.report.terminal.critical_path import CATEGORY_LABELS
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


def top_md(r: RankAnalysis, top: int = TOP_ROWS) -> str:
    out = []
    ops = r.sections.operators
    if ops is not None and ops.rows:
        dev = ops.has_device
        head = ["operator", "calls", *(["device self ms"] if dev else []), "host self ms"]
        rows = [[md_text(o.name) if o.shape is None else md_text(f"{o.name} {o.shape}", None),
                 _f(o.calls, 0), *([_f(o.device_self_us / 1000, 2)] if dev else []),
                 _f(o.host_self_us / 1000, 2)] for o in ops.rows[:top]]
        out += ["**Top operators**", "", table(head, rows), ""]
    kernels = r.sections.kernels
    if kernels is not None and kernels.rows:
        rows = [[md_text(short_kernel_name(k.name)), _f(k.calls, 0), _f(k.total_us / 1000, 2),
                 _f(k.share_pct, 1, "%")] for k in kernels.rows[:top]]
        out += ["**Top kernels**", "", table(["kernel", "calls", "total ms", "share"], rows), ""]
        out += _kernel_classes(kernels.classes)
    return "\n".join(out).rstrip()


def hardware_md(r: RankAnalysis, top: int = TOP_ROWS) -> str:
    """The roofline per op class and shape, and the collectives' bus bandwidth."""
    out = []
    roof = r.sections.roofline
    if roof is not None and roof.classes:
        device = roof.device.name if roof.device is not None else "unknown device"
        head = ["op class / shape", "dtype", "calls", "ms", "TFLOP/s", "TB/s", "bound",
                "% of roofline", "ms lost"]
        rows = [[md_text(f"{x.op} {x.shape}".strip() or x.op_class, None),
                 md_text(x.dtype), _f(x.calls, 0), _f(x.time_us / 1000, 2),
                 _f(x.achieved_tflops, 1), _f(x.achieved_tb_s, 2),
                 md_text(x.bound or "n/a"), _f(x.pct_of_roofline, 1, "%"),
                 _f(None if x.lost_us is None else x.lost_us / 1000, 2)]
                for x in [*roof.classes, *roof.shapes[:top]]]
        out += [f"**Roofline** on {md_text(device or 'unknown device')} "
                f"({_f(roof.coverage_pct, 0, '%')} of GPU time modelled)", "",
                table(head, rows), ""]
    coll = r.sections.collectives
    if coll is not None and coll.rows:
        rows = [[md_text(c.type), _f(c.bytes / 1e6, 2), _f(c.group_size, 0),
                 _f(c.count, 0), _f(c.busbw_gb_s, 1), _f(c.pct_of_peak, 1, "%")]
                for c in coll.rows[:top]]
        out += ["**Collectives' bus bandwidth**", "",
                table(["collective", "MB", "ranks", "calls", "busbw GB/s", "% of link"], rows),
                ""]
    return "\n".join(out).rstrip()


def critical_path_md(path: CriticalPath | None) -> str:
    """The path's split and its what-if table (docs/critical_path.md)."""
    if path is None or not path.step_ms:
        return ""
    split = [[CATEGORY_LABELS.get(k, k), _f(v, 1, "%")]
             for k, v in sorted(path.split_pct.items(), key=lambda kv: -kv[1]) if v > 0]
    out = [f"{_f(path.step_ms, 2)} ms a step, replayed.", "",
           table(["on the path", "% of step"], split, "lr")]
    items = [[md_text(f"{i.kind}: " + (short_kernel_name(i.name) if i.kind == "kernel"
                                        else i.name)), _f(i.on_path_pct, 1, "%"),
              _f(i.step_ms_if_zero, 2), _f(i.step_ms_if_half, 2),
              _f(i.saving_pct_if_zero, 1, "%")] for i in path.items]
    if items:
        out += ["", table(["item", "% of path", "step ms if 0", "if half", "saves ≤"], items,
                          "lrrrr")]
    return "\n".join(out)


def collective_ranks_md(ranks: CollectiveRanks | None, top: int = 16) -> str:
    """Each rank's collective bus bandwidth, slowest link first (analysis/job/collective_ranks.py)."""
    rows = sorted(ranks.rows if ranks is not None else [], key=lambda r: r.busbw_gb_s)
    if len(rows) < 2:
        return ""
    body = [[str(r.rank), _f(r.calls, 0), _f(r.time_us / 1000, 2), _f(r.busbw_gb_s, 1),
             _f(r.pct_of_peak, 1, "%")] for r in rows[:top]]
    more = f"\n\nThe {top} slowest of {len(rows)}; the JSON result has all." \
        if len(rows) > top else ""
    return table(["rank", "calls", "ms", "busbw GB/s", "% of link"], body, "rrrrr") + more


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
    job, sections = analysis.job, slowest.sections
    if job.rank_table is not None and len(job.rank_table.rows) > 1:
        straggler = job.stragglers.straggler if job.stragglers is not None else None
        out += ["### Ranks (ms per step)", "",
                ranks_md(job.rank_table, straggler, options.all_ranks), ""]
        arrival = job.stragglers.arrival if job.stragglers is not None else None
        if arrival:
            out += [md_text(arrival, None), ""]
    out += [f"### Overview: {where}", "", overview_md(slowest), ""]
    tops = top_md(slowest, top)
    if tops:
        out += ["### Where the time goes: top ops", "", tops, ""]
    if modules and sections.modules is not None:
        out += ["### Time per module", "", modules_md(sections.modules), ""]
    path = critical_path_md(sections.critical_path)
    if path:
        out += ["### What sets the step time: the critical path", "", path, ""]
    hardware = hardware_md(slowest, top)
    if hardware:
        out += ["### How far from the hardware", "", hardware, ""]
    parallel = "\n\n".join(x for x in (parallelism_md(sections.parallelism, job.pipeline),
                                        model_parallel_md(sections.parallelism, job.experts))
                            if x)
    if parallel:
        out += ["### Parallelism", "", parallel, ""]
    per_rank = collective_ranks_md(job.collective_ranks)
    if per_rank:
        out += ["### Collectives' bus bandwidth per rank", "", per_rank, ""]
    notes = [*slowest.notes, *analysis.notes]
    out += [f"> Note: {md_text(n, None)}" for n in notes]
    return "\n".join(out).rstrip() + "\n"


def _kernel_classes(classes: KernelClassShares | None) -> list[str]:
    """One line: kernel time per class, and the unclassified share (docs/kernel_classes.md)."""
    if classes is None or not classes.total_us:
        return []
    p = classes.class_pct
    return [f"Kernel classes: communication {_f(p.get('communication'), 1, '%')}, Tensor Core "
            f"{_f(p.get('tensor_core'), 1, '%')}, other compute {_f(p.get('compute'), 1, '%')}; "
            f"unclassified {_f(classes.unclassified_pct, 1, '%')}.", ""]
