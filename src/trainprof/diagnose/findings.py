"""The Finding: what is slow, how sure we are, what it costs, and what to change."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from trainprof.analysis.dataframes import data_frame
from trainprof.display import NotebookDisplay
from trainprof.vocabulary import SEVERITY_ORDER, Severity  # noqa: F401 (re-exported)

DOCS = "docs/rules.md"


@dataclass
class Evidence:
    """One measured number behind a finding, with its unit and where it was measured."""

    what: str
    value: float | int | str
    unit: str = ""
    where: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "value": self.value, "unit": self.unit, "where": self.where}

    def __str__(self) -> str:
        value = f"{self.value:.1f}" if isinstance(self.value, float) else str(self.value)
        # "%", "% of ..." and "x" follow the number; other units (ms, µs, MB/step) are spaced.
        unit = self.unit if self.unit[:1] in ("%", "") or self.unit == "x" else f" {self.unit}"
        where = f" ({self.where})" if self.where else ""
        return f"{self.what}: {value}{unit}{where}"


@dataclass
class Fix:
    """What to change, with a snippet for plain PyTorch and, where it differs, for accelerate."""

    summary: str
    pytorch: str = ""
    accelerate: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"summary": self.summary, "pytorch": self.pytorch, "accelerate": self.accelerate}


@dataclass(repr=False)
class Finding(NotebookDisplay):
    """One diagnosis: what is slow (``id``, ``title``), why (``explanation``, ``evidence``),
    what it costs (``saving_pct`` of the step, ``saving_ms`` per step, and the assumption) and
    what to change (``fix``). ``rank`` is None when it concerns the whole job."""

    id: str
    severity: Severity
    rank: int | None
    title: str
    explanation: str
    evidence: list[Evidence]
    saving_pct: float
    saving_ms: float
    saving_assumption: str
    fix: Fix
    window: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def docs(self) -> str:
        return f"{DOCS}#{self.id.replace('_', '-')}"

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Finding:
        """The finding back from ``to_dict()`` (keys it does not know go to ``extra``)."""
        known = {f.name for f in fields(Finding)} - {"evidence", "fix", "extra"}
        return Finding(
            **{k: v for k, v in d.items() if k in known},
            evidence=[Evidence(**e) for e in d.get("evidence", [])],
            fix=Fix(**d.get("fix", {"summary": ""})),
            extra={k: v for k, v in d.items() if k not in known | {"evidence", "fix", "docs"}},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "rank": self.rank,
            "window": self.window,
            "title": self.title,
            "explanation": self.explanation,
            "evidence": [e.to_dict() for e in self.evidence],
            "saving_pct": round(self.saving_pct, 2),
            "saving_ms": round(self.saving_ms, 3),
            "saving_assumption": self.saving_assumption,
            "fix": self.fix.to_dict(),
            "docs": self.docs,
            **self.extra,
        }


#: A finding that saves less than this share of a step (rounds to "~0%") is shown folded, in one
#: line, unless it is high severity (a risk, such as memory pressure, whose saving is not time).
MINOR_SAVING_PCT = 0.5


def is_minor(saving_pct: float | None, severity: str) -> bool:
    """Whether a finding's saving is too small for a full card (reports fold it to one line)."""
    return (saving_pct or 0.0) < MINOR_SAVING_PCT and severity != "high"


def ranked(findings: list[Finding]) -> list[Finding]:
    """Most costly first; ties broken by severity, then by id for a stable order."""
    return sorted(
        findings,
        key=lambda f: (-round(f.saving_pct, 2), SEVERITY_ORDER[f.severity], f.id,
                       -1 if f.rank is None else f.rank),
    )


class Findings(NotebookDisplay, list):
    """The findings of an analysis, most costly first: a list that shows as a table in a
    notebook."""

    def to_pandas(self) -> Any:
        """One row per finding: rank, id, severity, saving (% of the step, ms per step), title."""
        return data_frame([{"rank": f.rank, "window": f.window, "id": f.id,
                            "severity": str(f.severity), "saving_pct": f.saving_pct,
                            "saving_ms": f.saving_ms, "title": f.title} for f in self])
