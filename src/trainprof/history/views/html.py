"""``trainprof history --format html``: one self-contained page, a chart per run name.

Each series gets a line chart of its median (and p90) step time over its runs, flagged changes
as dots (red: slower, green: faster), and one of samples/s when it was measured; then the runs
table. Rendered by jinja2 with autoescape on; the charts come from ``report.html.svg`` (which escapes
its own text) and the style is the HTML report's own.
"""

from __future__ import annotations

import math
import os
import re
from functools import cache
from pathlib import Path

import jinja2

from trainprof.fileio import atomic_write_text
from trainprof.formatting import number
from trainprof.history.store.rows import RunRecord
from trainprof.history.views.regress import Series
from trainprof.history.views.terminal import change_sentence, verdicts_by_id, when
from trainprof.report.html.assets import asset
from trainprof.report.html.svg import Line, legend, line_chart
from trainprof.report.html.svg import Series as Look
from trainprof.report.quantities import size
from trainprof.version import __version__

MEDIAN = Look("median step", "#3b6fd8")
P90 = Look("p90 step", "#9aa7bd")
RATE = Look("samples/s", "#9b4dca")
SLOWER, FASTER = "#c8372d", "#2e8b57"
HEADINGS = ("id", "recorded", "name", "kind", "commit", "host", "ranks", "steps", "median ms",
            "p90 ms", "samples/s", "peak memory", "vs baseline", "top finding")


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("trainprof.history", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined)


def render_html(records: list[RunRecord], series: list[Series], db: str, filters: str = "") -> str:
    """The page for these runs and their series."""
    verdicts = verdicts_by_id(series)
    context = {
        "version": __version__, "db": db, "filters": filters, "runs": records,
        "series": [_series_view(s, i) for i, s in enumerate(series)],
        "headings": HEADINGS, "rows": [_row(r, verdicts) for r in records],
        "css": asset("report.css"),
    }
    return _environment().get_template("history.html.j2").render(context)


def write_html(records: list[RunRecord], series: list[Series], path: str | os.PathLike[str],
               db: str, filters: str = "") -> Path:
    return atomic_write_text(Path(path), render_html(records, series, db, filters))


def _series_view(s: Series, index: int) -> dict:
    first, last = s.points[0], s.points[-1]
    anchor = f"series-{index}-{re.sub(r'[^a-z0-9]+', '-', s.name.lower())}"
    title = f"{s.name} ({s.kind.replace('_', ' ')})"
    if len(s.points) < 2:  # a line needs two runs: say what the one run measured instead
        rate = f", {first.samples_per_s:,.0f} samples/s" if first.samples_per_s else ""
        return {"anchor": anchor, "title": title, "charts": [],
                "summary": f"1 run, {when(first.first.recorded_at)}: median step "
                           f"{_fmt(first.median_ms, 1)} ms{rate}. The chart starts with the "
                           "second run.",
                "changes": []}
    xs, x_unit = _time_axis([p.first.recorded_at for p in s.points])
    medians = [_nan(p.median_ms) for p in s.points]
    p90 = [_nan(max((r.step_ms_p90 for r in p.rows if r.step_ms_p90 is not None), default=None))
           for p in s.points]
    marks = [(x, p.median_ms, change_sentence(p, v), SLOWER if v.status == "regression" else FASTER)
             for x, (p, v) in zip(xs, zip(s.points, s.verdicts, strict=True), strict=True)
             if v.flagged and p.median_ms is not None]  # a flagged run has a median
    lines = [Line(MEDIAN, medians)] + ([Line(P90, p90)] if any(v == v for v in p90) else [])
    charts = [{"svg": line_chart(xs, lines, x_unit, "ms", f"Step time of {title}", marks=marks),
               "legend": legend([ln.series for ln in lines]),
               "caption": "Median and p90 step time per run; dots mark flagged changes."}]
    rates = [_nan(p.samples_per_s) for p in s.points]
    if any(r == r for r in rates):
        charts.append({"svg": line_chart(xs, [Line(RATE, rates)], x_unit,
                                         "samples/s", f"Throughput of {title}"),
                       "legend": legend([RATE]), "caption": "Samples per second per run."})
    return {"anchor": anchor, "title": title, "charts": charts,
            "summary": f"{len(s.points)} runs, {when(first.first.recorded_at)} to "
                       f"{when(last.first.recorded_at)}",
            "changes": [change_sentence(p, v) for p, v in s.flagged()]}


def _row(r: RunRecord, verdicts: dict) -> list[str]:
    _, verdict = verdicts.get(r.id, (None, None))
    status = "" if verdict is None else verdict.status + (
        f" {verdict.change_pct:+.1f}%" if verdict.change_pct is not None else "")
    top = r.top_finding or {}
    return [str(r.id), when(r.recorded_at), r.name, r.kind, (r.git_commit or "")[:8], r.host or "",
            str(r.world_size or ""), str(r.steps), _fmt(r.step_ms_median), _fmt(r.step_ms_p90),
            _fmt(r.samples_per_s, 0), size(r.peak_memory_bytes) if r.peak_memory_bytes else "",
            status, str(top.get("title") or top.get("id") or "")]


#: (span below which the unit is used, seconds per unit, its name), smallest first.
_TIME_UNITS = ((120.0, 1.0, "seconds"), (2 * 3600.0, 60.0, "minutes"),
               (2 * 86400.0, 3600.0, "hours"), (math.inf, 86400.0, "days"))


def _time_axis(times: list[float]) -> tuple[list[float], str]:
    """When each run was recorded since the first, in the unit that gives the span readable
    ticks (seconds for runs a minute apart, days for runs weeks apart)."""
    span = max(times) - min(times)
    unit, name = next((u, n) for below, u, n in _TIME_UNITS if span < below)
    return [(t - times[0]) / unit for t in times], f"{name} since {when(times[0])}"


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


_fmt = number
