"""The self-contained HTML report: one file, every style, script and chart inline.

``render_html(result)`` takes the JSON result (or an ``Analysis``) and returns the page;
``write_html`` writes it atomically. How escaping is guaranteed (docs/reports.md): the template
is rendered by jinja2 with autoescape on, so every string from a trace is escaped where it is
placed; the only ``Markup`` (unescaped) pieces are our own style and script files, charts from
``report.html.svg`` (which escapes its own text) and the embedded result, which ``json_for_script``
makes safe inside ``<script>`` (no ``<``, ``>``, ``&``, U+2028 or U+2029 left in it).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import msgspec
from markupsafe import Markup

from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.diagnose.findings import shared_number, typed_findings
from trainprof.fileio import atomic_write_text
from trainprof.report.html.assets import TEMPLATES, asset, script_hash
from trainprof.report.html.snapshot import memory_headline, memory_views
from trainprof.report.html.spread import side_by_side
from trainprof.report.html.tables import DEFAULT_ROWS
from trainprof.report.html.view import (
    finding_view,
    headline,
    job_blocks,
    rank_view,
    ranks_chart,
    ranks_table,
)
from trainprof.report.json import to_json_bytes
from trainprof.version import __version__

#: Ranks shown in full (the slowest first); the rest appear in the per-rank table only.
MAX_DETAILED_RANKS = 8
#: Keys of a rank kept in the embedded result for ranks not shown in full (their deep sections
#: would make a many-rank report tens of MB).
SUMMARY_KEYS = ("rank", "window", "file", "device", "steps", "breakdown_pct", "breakdown_ms",
                "phases_pct", "phases_ms", "gpu", "gpus", "timeline", "environment", "notes")
#: Row names of the environment's facts (others: the key with spaces).
ENVIRONMENT_LABELS = {"schema_version": "Kineto trace schema version", "world_size": "world size",
                      "pytorch_version": "PyTorch", "cuda_runtime_version": "CUDA runtime",
                      "cuda_driver_version": "CUDA driver",
                      "cupti_version": "CUPTI (the profiler's GPU tracer) API version"}
_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                   "\u2029": "\\u2029"}


def json_for_script(data: Any) -> Markup:
    """``data`` as JSON that is safe inside a ``<script>`` element: it cannot close the element,
    open a comment, or hold a line separator that old parsers treat as a line end."""
    text = msgspec.json.encode(data).decode("utf-8")
    for char, escaped in _SCRIPT_ESCAPES.items():
        text = text.replace(char, escaped)
    return Markup(text)


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("trainprof.report", TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _plain(result: Analysis | dict[str, Any]) -> dict[str, Any]:
    """The result as plain JSON values (no numpy, no NaN), whatever it was given as."""
    return msgspec.json.decode(to_json_bytes(result))


def render_html(result: Analysis | dict[str, Any], rows: int | None = None) -> str:
    """The report page for a result; ``rows`` per operator and kernel table (None: the
    analysis's ``options.top``, at least ``DEFAULT_ROWS``), every rank's row if its options
    ask for all (a saved result's JSON: the defaults)."""
    options = result.options if isinstance(result, Analysis) else AnalyzeOptions()
    rows = max(options.top, DEFAULT_ROWS) if rows is None else rows
    data = _plain(result)
    analysis = analysis_from_dict(data)  # the same records, whatever the result was given as
    ranks = analysis.ranks
    order = sorted(range(len(ranks)), key=lambda i: -(ranks[i].steps.median_ms or 0))
    shown = sorted(order[:MAX_DETAILED_RANKS])
    slowest = order[0] if ranks else None
    rank_table = analysis.job.rank_table
    straggler = _straggler(analysis)
    side, side_note = side_by_side(ranks, rank_table, straggler, options.all_ranks)
    found = typed_findings(analysis.findings)
    # ``memory_snapshots``: not a record; ``trainprof report`` adds it to the JSON
    # (commands/report.py).
    snapshots = len(data.get("memory_snapshots") or [])
    context = {
        "version": __version__,
        "source": analysis.source or (ranks[0].path.name if ranks else ""),
        "headline": memory_headline(data) or headline(found),
        "findings": [finding_view(f, i, shared_number(f, found)) for i, f in enumerate(found, 1)],
        "several": len(ranks) > 1,
        "ranks_table": ranks_table(side, straggler) if len(ranks) > 1 else None,
        "ranks_chart": ranks_chart(side) if len(ranks) > 1 else None,
        "ranks_note": side_note,
        "details": [(rank_view(ranks[i], i, rows), i == slowest)
                    for i in shown],
        "hidden_ranks": len(ranks) - len(shown),
        "hidden_where": ("the histograms and the JSON result" if side_note
                         else "the table above"),
        "environment": environment_rows(analysis, snapshots),
        "devices": _devices(ranks),
        "job_notes": _job_notes(analysis),
        "job_sections": job_blocks(analysis, rows, options.all_ranks),
        "memory": memory_views(data),
        "result_json": json_for_script(embedded(data, set(shown))),
        "css": asset("report.css"),
        "js": asset("report.js"),
        "script_hash": script_hash("report.js"),
    }
    return _environment().get_template("report.html.j2").render(context)


def embedded(data: dict[str, Any], detailed: set[int]) -> dict[str, Any]:
    """The result the page carries: whole for the ranks shown in full, their summary for the
    others (``trimmed_ranks`` lists those)."""
    if len(detailed) == len(data["ranks"]):
        return data
    ranks = [r if i in detailed else {k: r[k] for k in SUMMARY_KEYS if k in r}
             for i, r in enumerate(data["ranks"])]
    trimmed = [r["rank"] for i, r in enumerate(data["ranks"]) if i not in detailed]
    return {**data, "ranks": ranks, "trimmed_ranks": trimmed}


def write_html(result: Analysis | dict[str, Any], path: str | os.PathLike[str],
               rows: int | None = None) -> Path:
    """Write the report atomically; returns its path."""
    return atomic_write_text(Path(path), render_html(result, rows))


def environment_rows(analysis: Analysis, snapshots: int = 0) -> list[tuple[str, str]]:
    """What the traces say about where they were recorded, one row per fact; ``snapshots``: the
    memory snapshots the page shows (said instead when there is no rank)."""
    ranks = analysis.ranks
    # The environment is the trace's own metadata (free-form keys), kept as it is.
    env = ranks[0].environment if ranks else {}
    rows = [("ranks and windows analysed", str(len(ranks))),
            ("trace files", ", ".join(dict.fromkeys(r.path.name for r in ranks)))]
    if not ranks:  # a page of memory snapshots only: say what it analysed instead of "0"
        rows = [("memory snapshots analysed", str(snapshots))]
    for key, value in env.items():
        if key == "devices" or value is None:
            continue
        rows.append((ENVIRONMENT_LABELS.get(key, key.replace("_", " ")), _version(key, value)))
    if env and env.get("pytorch_version") is None:
        rows.append(("PyTorch", "not recorded in the trace"))
    versions = {str(r.environment.get("schema_version")) for r in ranks}
    if len(versions) > 1:
        rows.append(("schema versions differ across ranks", ", ".join(sorted(versions))))
    rows.append(("trainprof", __version__))
    return rows


def _version(key: str, value: Any) -> str:
    """CUDA versions as Kineto writes them (12040) in the form people know (12.4)."""
    if key.startswith("cuda_") and isinstance(value, int) and value >= 1000:
        return f"{value // 1000}.{value % 1000 // 10}"
    return str(value)


def _devices(ranks: list[RankAnalysis]) -> list[dict[str, str]]:
    """The devices the traces describe (Kineto's ``deviceProperties``: the trace's own keys)."""
    seen: dict[str, dict[str, str]] = {}
    for r in ranks:
        for d in r.environment.get("devices", []):
            mem = d.get("totalGlobalMem")
            cc = (f"{d.get('computeMajor')}.{d.get('computeMinor')}"
                  if d.get("computeMajor") is not None else "")
            row = {"id": str(d.get("id", "")), "name": str(d.get("name", "")),
                   "memory": f"{mem / 1e9:.1f} GB" if isinstance(mem, int | float) else "",
                   "compute": cc, "sms": str(d.get("numSms") or "")}
            seen.setdefault(f"{row['id']}|{row['name']}", row)
    return list(seen.values())


def _straggler(analysis: Analysis) -> int | None:
    stragglers = analysis.job.stragglers
    return None if stragglers is None else stragglers.straggler


def _job_notes(analysis: Analysis) -> list[str]:
    """The job's notes, then each job section's, named."""
    job = analysis.job
    notes = list(analysis.notes)
    for name, section in (("stragglers", job.stragglers), ("pipeline", job.pipeline),
                          ("experts", job.experts)):
        if section is not None:
            notes += [f"{name}: {n}" for n in section.notes]
    return notes
