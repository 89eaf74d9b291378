"""Saved JSON results (``trainprof analyze --format json``) as report and compare inputs.

A result is told from a trace by its first key: ``{"schema": "trainprof.analysis/...``. It is
read back into the records it was written from (analysis/decode.py), which every renderer and
``analysis.diff`` read like a fresh analysis.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec

from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.job.cluster_file import CLUSTER_SCHEMA
from trainprof.analysis.results import SCHEMA, Analysis
from trainprof.diagnose.findings import typed_findings
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


def saved_analysis(path: str | os.PathLike[str]) -> Analysis:
    """The saved result at ``path`` read into the records it was written from, its findings
    ``Finding``s; ``TraceError`` when it is unreadable or of another schema."""
    analysis = analysis_from_dict(load_result(path))
    analysis.findings = typed_findings(analysis.findings)
    return analysis
