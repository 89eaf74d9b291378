"""Result objects in Jupyter: small self-contained HTML sections, and one-line reprs.

Every string from a trace is escaped (jinja2 autoescape). The analysis also carries the whole
report page (report/html/report.py) in a sandboxed ``<iframe srcdoc>``, folded away under "Full
report", so that its styles and script stay inside it. Nothing is fetched from the network.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import jinja2

from trainprof.diagnose.findings import Finding, typed_findings
from trainprof.formatting import counted

if TYPE_CHECKING:
    from trainprof.analysis.deltas import Delta
    from trainprof.analysis.results import Analysis, RankAnalysis
    from trainprof.diagnose.comparison import Comparison

#: Rows of the history shown in a notebook (the newest).
HISTORY_ROWS = 20
#: Rows of the compared ops shown.
COMPARE_ROWS = 10
#: Height of the full report's frame, in CSS pixels.
REPORT_HEIGHT_PX = 700

_STYLE = """<style>
.trainprof-nb table{border-collapse:collapse;margin:.3em 0;font-size:13px}
.trainprof-nb th,.trainprof-nb td{border:1px solid #ccc;padding:2px 8px;text-align:left}
.trainprof-nb td.n{text-align:right;font-variant-numeric:tabular-nums}
.trainprof-nb .high{color:#b00020;font-weight:bold}.trainprof-nb .medium{color:#b36b00}
</style>"""

_TEMPLATES = {
    "findings": """
<table class="trainprof-findings"><thead><tr><th>#</th><th>severity</th><th>finding</th>
<th>rank</th><th>saving % of step</th><th>saving ms/step</th><th>what it is</th>
<th>fix</th></tr></thead><tbody>
{% for f in findings %}<tr><td class="n">{{ loop.index }}</td>
<td class="{{ f.severity }}">{{ f.severity }}</td><td>{{ f.id }}</td>
<td class="n">{{ '' if f.rank is none else f.rank }}</td>
<td class="n">{{ '%.1f' % f.reported_saving_pct }}</td><td class="n">{{ '%.2f' % f.reported_saving_ms }}</td>
<td>{{ f.title }}</td><td>{{ f.fix.summary if f.fix else '' }}</td></tr>
{% else %}<tr><td colspan="8">No findings: nothing trainprof checks for looks slow.</td></tr>
{% endfor %}</tbody></table>""",
    "ranks": """
<table class="trainprof-ranks"><thead><tr><th>rank</th><th>device</th><th>steps</th>
<th>median step ms</th>{% for p in phases %}<th>{{ p }} %</th>{% endfor %}
<th>GPU busy %</th></tr></thead><tbody>
{% for r in ranks %}<tr><td class="n">{{ r.rank }}{{ '.w%d' % r.window if r.window else '' }}</td>
<td>{{ r.device }}</td><td class="n">{{ r.steps }}</td><td class="n">{{ r.median }}</td>
{% for v in r.phases %}<td class="n">{{ v }}</td>{% endfor %}<td class="n">{{ r.gpu }}</td></tr>
{% endfor %}</tbody></table>""",
    "analysis": """<div class="trainprof-nb">{{ style }}
<h3>trainprof: {{ source }}</h3>
<p>{{ headline }}</p>
<h4>Findings</h4>{{ findings }}
<h4>Ranks</h4>{{ ranks }}
<details><summary>Full report</summary>
<iframe title="trainprof report" sandbox="allow-scripts" srcdoc="{{ page }}"
 style="width:100%;height:{{ height }}px;border:1px solid #ccc"></iframe></details></div>""",
    "rank": """<div class="trainprof-nb">{{ style }}
<h4>Rank {{ rank }} on {{ device }}: {{ steps }} ({{ source }})</h4>{{ table }}
<table><thead><tr><th>step</th><th>ms</th></tr></thead><tbody>
{% for s in per_step %}<tr><td class="n">{{ s.step }}</td><td class="n">{{ '%.2f' % s.ms }}</td>
</tr>{% endfor %}</tbody></table></div>""",
    "wrap": """<div class="trainprof-nb">{{ style }}{{ body }}</div>""",
    "comparison": """<div class="trainprof-nb">{{ style }}
<h4>{{ base.label }} → {{ new.label }}</h4>
<table><thead><tr><th></th><th>base</th><th>new</th><th>change</th></tr></thead><tbody>
{% for name, row in lines %}<tr><td>{{ name }}</td><td class="n">{{ row.base }}</td>
<td class="n">{{ row.new }}</td><td class="n">{{ row.change }}</td></tr>{% endfor %}
</tbody></table>
<table><thead><tr><th>op</th><th>change</th><th>base µs/step</th><th>new µs/step</th></tr>
</thead><tbody>{% for op in ops %}<tr><td>{{ op.name }}</td><td>{{ op.change }}</td>
<td class="n">{{ '%.1f' % op.base_us }}</td>
<td class="n">{{ '%.1f' % op.new_us }}</td></tr>{% endfor %}</tbody></table>
{% if gate %}<p>{{ gate }}</p>{% endif %}</div>""",
    "history": """<div class="trainprof-nb">{{ style }}
<h4>Run history {{ path }}: {{ count }} runs (the newest {{ runs|length }})</h4>
<table><thead><tr><th>id</th><th>name</th><th>kind</th><th>recorded</th><th>steps</th>
<th>median step ms</th><th>samples/s</th><th>findings</th></tr></thead><tbody>
{% for r in runs %}<tr><td class="n">{{ r.id }}</td><td>{{ r.name }}</td><td>{{ r.kind }}</td>
<td>{{ r.when }}</td><td class="n">{{ r.steps }}</td><td class="n">{{ r.median }}</td>
<td class="n">{{ r.rate }}</td><td>{{ r.findings }}</td></tr>{% endfor %}</tbody></table></div>""",
}


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.DictLoader(_TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined)


def _render(name: str, **context: Any) -> str:
    return _env().get_template(name).render(style=jinja2.utils.markupsafe.Markup(_STYLE),
                                            **context)


def _markup(html: str) -> Any:
    return jinja2.utils.markupsafe.Markup(html)


def _num(value: Any, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _findings(findings: Any) -> list[Finding]:
    """``Finding``s, or their JSON objects (a saved result's), as ``Finding``s."""
    return typed_findings(list(findings))


def findings_table(findings: Any) -> str:
    """The findings as an HTML table (the same columns as the report's list)."""
    return _env().get_template("findings").render(findings=_findings(findings))


def _rank_rows(ranks: list[RankAnalysis]) -> tuple[list[str], list[dict[str, Any]]]:
    phases = list(ranks[0].phases_pct) if ranks else []
    rows = [{"rank": r.rank, "window": r.window, "device": r.device,
             "steps": r.steps.count, "median": _num(r.steps.median_ms, 2),
             "phases": [_num(r.phases_pct.get(p)) for p in phases],
             "gpu": _num(r.gpu.utilization_pct) if r.gpu is not None else ""} for r in ranks]
    return phases, rows


def ranks_table(ranks: list[RankAnalysis]) -> str:
    phases, rows = _rank_rows(ranks)
    return _env().get_template("ranks").render(phases=phases, ranks=rows)


def _headline(analysis: Analysis) -> str:
    medians = [r.steps.median_ms for r in analysis.ranks if r.steps.median_ms]
    top = _findings(analysis.findings[:1])
    step = f"median step {max(medians):,.1f} ms" if medians else "no steps found"
    first = (f"; the costliest finding: {top[0].title} ({top[0].severity})"
             if top else "; no findings")
    return f"{counted(len(analysis.ranks), 'rank')}, {step}{first}."


def analysis_html(analysis: Analysis) -> str:
    from trainprof.report.html.report import render_html

    return _render("analysis", source=analysis.source or (
        analysis.ranks[0].path.name if analysis.ranks else ""),
        headline=_headline(analysis), findings=_markup(findings_table(analysis.findings)),
        ranks=_markup(ranks_table(analysis.ranks)), page=render_html(analysis),
        height=REPORT_HEIGHT_PX)


def rank_html(rank: RankAnalysis) -> str:
    return _render("rank", rank=rank.rank, device=rank.device, steps=counted(rank.steps.count, "step"),
                   source=rank.step_source, table=_markup(ranks_table([rank])),
                   per_step=rank.steps.per_step)


def _delta_row(delta: Delta) -> dict[str, str]:
    return {"base": _num(delta.base, 2), "new": _num(delta.new, 2),
            "change": _pct(delta.delta_pct)}


def comparison_html(comparison: Comparison) -> str:
    diff = comparison.diff
    lines = [("median step ms", _delta_row(diff.step_ms))]
    lines += [(f"{phase} ms", _delta_row(v)) for phase, v in diff.phases_ms.items()]
    gate = comparison.gate.message() if comparison.gate else None
    return _render("comparison", base=comparison.base, new=comparison.new, lines=lines,
                   ops=diff.ops[:COMPARE_ROWS], gate=gate)


def _pct(value: Any) -> str:
    return "" if value is None else f"{value:+.1f}%"


def history_html(history: Any) -> str:
    import time

    runs = history.runs()
    newest = sorted(runs, key=lambda r: -(r.id or 0))[:HISTORY_ROWS]
    rows = [{"id": r.id, "name": r.name, "kind": r.kind,
             "when": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.recorded_at)),
             "steps": r.steps, "median": _num(r.step_ms_median, 2),
             "rate": _num(r.samples_per_s), "findings": ", ".join(
                 str(f.get("id")) for f in r.findings)} for r in newest]
    return _render("history", path=str(history.path), count=len(runs), runs=rows)


def html_of(obj: Any) -> str:
    """The notebook HTML of any trainprof result object."""
    kind = type(obj).__name__
    if kind == "Analysis":
        return analysis_html(obj)
    if kind == "RankAnalysis":
        return rank_html(obj)
    if kind == "Findings":
        return _render("wrap", body=_markup(findings_table(obj)))
    if kind == "Finding":
        return _render("wrap", body=_markup(findings_table([obj])))
    if kind == "Comparison":
        return comparison_html(obj)
    if kind == "History":
        return history_html(obj)
    raise TypeError(f"no notebook view for {kind}")


def short_of(obj: Any) -> str:
    """A one-line ``repr`` of any trainprof result object."""
    kind = type(obj).__name__
    if kind == "Analysis":
        return f"<Analysis of {obj.source or 'traces'}: {_headline(obj)[:-1]}>"
    if kind == "RankAnalysis":
        return (f"<RankAnalysis rank {obj.rank} window {obj.window} on {obj.device}: "
                f"{counted(obj.steps.count, 'step')}, median {_num(obj.steps.median_ms, 2)} "
                "ms>")
    if kind == "Findings":
        items = ", ".join(f"{f.id} ({f.severity}, {f.reported_saving_pct:.1f}%)" for f in obj[:3])
        more = f", and {len(obj) - 3} more" if len(obj) > 3 else ""
        return f"<{len(obj)} findings{': ' if obj else ''}{items}{more}>"
    if kind == "Finding":
        where = "the job" if obj.rank is None else f"rank {obj.rank}"
        return (f"<Finding {obj.id} ({obj.severity}, {where}): {obj.reported_saving_pct:.1f}% of the "
                "step>")
    if kind == "Comparison":
        b, n = obj.base, obj.new
        return (f"<Comparison {b.label} -> {n.label}: median step {_num(b.median_ms, 2)} -> "
                f"{_num(n.median_ms, 2)} ms>")
    if kind == "History":
        return f"<History {obj.path}>"
    return object.__repr__(obj)
