"""A saved JSON result (``trainprof.analysis/1``) read back into the typed records.

A record's JSON form is its own encoding (``trainprof.structs.Record``: its fields under their
JSON names, plus figures derived from them, which are computed again here); decoding is
``msgspec.convert`` of each part into its record's type, so that a renderer reads a saved result
through the same fields as a fresh one. ``report.saved.saved_analysis(path)`` reads a saved file
(refusing other schemas in one sentence) and makes its findings ``Finding``s.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

import msgspec

from trainprof import structs
from trainprof.analysis import results, section_results
from trainprof.analysis.overview.gpu import GpuFigures
from trainprof.analysis.overview.steps import StepStats
from trainprof.analysis.overview.timeline import Timeline
from trainprof.analysis.results import Analysis, RankAnalysis
from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.analysis.sections import registry
from trainprof.errors import TraceError


def _hints(container: type, sections: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each section's record type, by name: section_results names the types for the type
    checker only, so they are looked up in the modules that compute the sections."""
    names: dict[str, Any] = {**vars(structs), **vars(section_results)}  # structs: Record's
    for _, section in sections:
        fn = getattr(section, "combine", section)
        names.update({k: v for k, v in vars(sys.modules[fn.__module__]).items()
                      if isinstance(v, type) and k not in names})
    hints = typing.get_type_hints(container, globalns=names)
    return {name: hints[name] for name in structs.field_names(container)}


_RANK_SECTIONS = _hints(RankSections, registry.SECTIONS)
_JOB_SECTIONS = _hints(JobSections, registry.JOB_SECTIONS)


def _dec_hook(kind: type, value: Any) -> Any:
    if kind is Path:
        return Path(value)
    raise NotImplementedError(f"{kind} from JSON")


def record(value: Any, kind: Any, where: str = "") -> Any:
    """``value`` (a part of a saved result) as ``kind``; ``TraceError`` naming ``where``."""
    try:
        return msgspec.convert(value, kind, strict=False, dec_hook=_dec_hook)
    except msgspec.ValidationError as exc:
        named = "" if kind in (_Head, _RankHead) else f" as {_name(kind)}"
        raise TraceError(f"The saved result's {where or 'value'} does not read{named}: "
                         f"{exc}.") from None


def _name(kind: Any) -> str:
    """``IdleTime`` for ``IdleTime | None``."""
    named = [k for k in typing.get_args(kind) if k is not type(None)] or [kind]
    return " | ".join(getattr(k, "__name__", str(k)) for k in named)


def _sections(data: dict[str, Any], container: type, hints: dict[str, Any], where: str,
              notes: list[str]) -> Any:
    """The sections present in ``data``; one that does not read (a result written by another
    version of trainprof) is left out with a note saying so, the others are kept."""
    found = {}
    for name, hint in hints.items():
        if data.get(name) is None:
            continue
        try:
            found[name] = record(data[name], hint, f"{where}{name}")
        except TraceError as exc:
            notes.append(f"{exc} The section is left out: the result was written by another "
                         "version of trainprof.")
    return container(**found)


class _RankHead(msgspec.Struct):
    """A rank's own keys in a saved result (its sections aside)."""

    rank: int = 0
    window: int = 0
    file: str = ""
    device: str = ""
    steps: dict[str, Any] = {}
    breakdown_pct: dict[str, float] = {}
    breakdown_ms: dict[str, float] = {}
    phases_pct: dict[str, float] = {}
    phases_ms: dict[str, float] = {}
    gpus: list[GpuFigures] = []
    timeline: Timeline | None = None
    environment: dict[str, Any] = {}
    notes: list[str] = []


class _Head(msgspec.Struct):
    """A saved result's own keys."""

    source: str = ""
    ranks: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    notes: list[str] = []
    job: dict[str, Any] = {}


def rank_from_dict(data: dict[str, Any]) -> RankAnalysis:
    """One rank's part of a saved result as a ``RankAnalysis``."""
    where = f"rank {data.get('rank', '?')}"
    head = record(data, _RankHead, where)
    notes = list(head.notes)
    sections = _sections(data, RankSections, _RANK_SECTIONS, where + ": ", notes)
    return RankAnalysis(
        rank=head.rank, window=head.window, path=Path(head.file), device=head.device,
        steps=record(head.steps, StepStats, where + ": steps"),
        step_source=str(head.steps.get("source", "")),
        breakdown_pct=head.breakdown_pct, breakdown_ms=head.breakdown_ms,
        phases_pct=head.phases_pct, phases_ms=head.phases_ms, gpus=head.gpus,
        timeline=head.timeline, environment=head.environment, notes=notes, sections=sections)


def analysis_from_dict(data: dict[str, Any]) -> Analysis:
    """A saved result (its JSON decoded) as the ``Analysis`` it was written from. The findings
    stay as their JSON objects (the diagnosis is a layer above these records:
    ``diagnose.findings.typed_findings``). A section that does not read is left out with a
    note; ``TraceError`` when the result's own shape does not read."""
    head = record(data, _Head, "top level")
    notes = list(head.notes)
    job = _sections(head.job, JobSections, _JOB_SECTIONS, "job: ", notes)
    return Analysis(ranks=[rank_from_dict(r) for r in head.ranks], findings=list(head.findings),
                    notes=notes, source=head.source, job=job)


assert results.SCHEMA  # the schema this module reads (analysis/results.py)
