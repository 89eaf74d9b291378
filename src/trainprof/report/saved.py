"""Saved JSON results (``trainprof analyze --format json``) as report and compare inputs.

A result is told from a trace by its first key: ``{"schema": "trainprof.analysis/...``. For
``compare``, a result becomes a light ``Analysis`` that ``analysis.diff`` reads like a fresh one
(steps, breakdown, phases, and the operator and kernel tables as plain rows).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec

from trainprof.analysis.cluster_file import CLUSTER_SCHEMA
from trainprof.analysis.results import SCHEMA, Analysis, RankAnalysis
from trainprof.errors import TraceError

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
    source = steps.pop("source", "")
    sections: dict[str, Any] = {}
    if isinstance(r.get("operators"), dict):
        ops = r["operators"]
        sections["operators"] = SimpleNamespace(
            has_device=bool(ops.get("has_device")),
            rows=[SimpleNamespace(**row) for row in ops.get("rows", [])])
    if isinstance(r.get("kernels"), dict):
        sections["kernels"] = SimpleNamespace(
            rows=[SimpleNamespace(**row) for row in r["kernels"].get("rows", [])])
    return RankAnalysis(
        rank=int(r.get("rank", 0)), window=int(r.get("window", 0)),
        path=Path(str(r.get("file", ""))), device=str(r.get("device", "")), steps=steps,
        step_source=source, breakdown_pct=dict(r.get("breakdown_pct") or {}),
        breakdown_ms=dict(r.get("breakdown_ms") or {}),
        phases_pct=dict(r.get("phases_pct") or {}), phases_ms=dict(r.get("phases_ms") or {}),
        gpus=[], timeline=None, environment=dict(r.get("environment") or {}),
        notes=list(r.get("notes") or []), sections=sections,
    )
