"""Saved JSON results (``trainprof analyze --format json``) as report and compare inputs.

A result is told from a trace by its first key: ``{"schema": "trainprof.analysis/...``. For
``compare``, a result becomes a light ``Analysis`` that ``analysis.diff`` reads like a fresh one
(steps, breakdown, phases, and the operator and kernel tables' rows).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from trainprof.analysis.job.cluster_file import CLUSTER_SCHEMA
from trainprof.analysis.overview.steps import StepStats
from trainprof.analysis.results import SCHEMA, Analysis, RankAnalysis
from trainprof.analysis.section_results import RankSections
from trainprof.analysis.sections.kernels import KernelRow, KernelStats
from trainprof.analysis.sections.operators import OperatorRow, OperatorStats
from trainprof.errors import TraceError
from trainprof.structs import fields

_SCHEMA_FAMILY = SCHEMA.rsplit("/", 1)[0] + "/"
_HEAD = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"' + re.escape(_SCHEMA_FAMILY.encode()))
_ANY_TRAINPROF = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"(trainprof\.[^"]*)"')
_PEEK_BYTES = 256


def is_saved_result(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file holding a trainprof JSON result (not a trace)."""
    return bool(_HEAD.match(_peek(path)))


def refuse_other_results(path: str | os.PathLike[str],
                         accepted: tuple[str, ...] = (SCHEMA, CLUSTER_SCHEMA)) -> None:
    """``TraceError`` when ``path`` holds trainprof output of a schema not ``accepted`` (a
    comparison, a benchmark...), which would otherwise be called "not a trace"."""
    found = _ANY_TRAINPROF.match(_peek(path))
    if found and found.group(1).decode() not in accepted:
        raise TraceError(f"{path} is trainprof output of schema {found.group(1).decode()!r}, not "
                         "a trace or a result saved by `trainprof analyze --format json`.")


def _peek(path: str | os.PathLike[str]) -> bytes:
    path = Path(path)
    if not path.is_file():
        return b""
    with open(path, "rb") as handle:
        return handle.read(_PEEK_BYTES)


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The saved result as a dict; ``TraceError`` when it is unreadable or of another schema."""
    try:
        data = msgspec.json.decode(Path(path).read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise TraceError(f"Cannot read the saved result {path}: {exc}.") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise TraceError(f"{path} is a result of schema {found!r}; this trainprof reads {SCHEMA}.")
    if not data.get("ranks"):
        raise TraceError(f"The saved result {path} holds no ranks.")
    return data


def analysis_from_result(data: dict[str, Any]) -> Analysis:
    """A light ``Analysis`` rebuilt from a saved result, enough for ``analysis.diff.diff``."""
    ranks = [_rank(r) for r in data["ranks"]]
    return Analysis(ranks=ranks, findings=list(data.get("findings") or []),
                    notes=list(data.get("notes") or []), source=str(data.get("source", "")))


def _rank(r: dict[str, Any]) -> RankAnalysis:
    steps = dict(r["steps"])
    sections = RankSections()
    if isinstance(r.get("operators"), dict):
        ops = r["operators"]
        sections.operators = OperatorStats(
            rows=[_row(OperatorRow, row) for row in ops.get("rows", [])],
            sort_by=str(ops.get("sort_by", "")), by_shape=bool(ops.get("by_shape")),
            has_device=bool(ops.get("has_device")), has_stacks=False)
    if isinstance(r.get("kernels"), dict):
        k = r["kernels"]
        sections.kernels = KernelStats(
            rows=[_row(KernelRow, row) for row in k.get("rows", [])],
            total_us=float(k.get("total_us") or 0.0), calls=int(k.get("calls") or 0),
            tensor_core_pct=k.get("tensor_core_pct"))
    return RankAnalysis(
        rank=int(r.get("rank", 0)), window=int(r.get("window", 0)),
        path=Path(str(r.get("file", ""))), device=str(r.get("device", "")),
        steps=StepStats.from_dict(steps), step_source=str(steps.get("source", "")),
        breakdown_pct=dict(r.get("breakdown_pct") or {}),
        breakdown_ms=dict(r.get("breakdown_ms") or {}),
        phases_pct=dict(r.get("phases_pct") or {}), phases_ms=dict(r.get("phases_ms") or {}),
        gpus=[], timeline=None, environment=dict(r.get("environment") or {}),
        notes=list(r.get("notes") or []), sections=sections,
    )


_Row = TypeVar("_Row", OperatorRow, KernelRow)


def _row(cls: type[_Row], row: dict[str, Any]) -> _Row:
    """A table row from its JSON form (call sites left out: ``diff`` reads names and times)."""
    keep = {f.name for f in fields(cls)} - {"call_sites"}
    try:
        return cls(**{k: v for k, v in row.items() if k in keep})
    except TypeError:
        missing = sorted(keep - set(row))
        raise TraceError(f"A saved {cls.__name__} lacks {', '.join(missing)}.") from None
