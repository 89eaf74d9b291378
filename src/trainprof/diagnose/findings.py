"""The Finding: what is slow, how sure we are, what it costs, and what to change."""

from __future__ import annotations

from typing import Any

from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.display import NotebookDisplay
from trainprof.errors import TraceError
from trainprof.structs import Derived, Record, fields
from trainprof.vocabulary import SEVERITY_ORDER, Severity  # noqa: F401 (re-exported)

DOCS = "docs/rules.md"


class Evidence(Record):
    """One measured number behind a finding, with its unit and where it was measured."""

    what: str
    value: float | int | str
    unit: str = ""
    where: str = ""

    def __str__(self) -> str:
        value = f"{self.value:.1f}" if isinstance(self.value, float) else str(self.value)
        # "%", "% of ..." and "x" follow the number; other units (ms, µs, MB/step) are spaced.
        unit = self.unit if self.unit[:1] in ("%", "") or self.unit == "x" else f" {self.unit}"
        where = f" ({self.where})" if self.where else ""
        return f"{self.what}: {value}{unit}{where}"


class Fix(Record):
    """What to change, with a snippet for plain PyTorch and, where it differs, for accelerate."""

    summary: str
    pytorch: str = ""
    accelerate: str = ""


class Finding(NotebookDisplay, Record):
    """One diagnosis: what is slow (``id``, ``title``), why (``explanation``, ``evidence``),
    what it costs (``saving_pct`` of the step, ``saving_ms`` per step, and the assumption) and
    what to change (``fix``). ``rank`` is None when it concerns the whole job. Its JSON gives
    the savings as every report does (``reported_saving_*``), its rule's docs, and its
    free-form ``extra`` keys beside the others."""

    json_derived = (Derived("window", "rank"),
                    Derived("saving_pct", "evidence", attr="reported_saving_pct"),
                    Derived("saving_ms", "saving_pct", attr="reported_saving_ms"),
                    Derived("docs", "fix"))
    json_internal = frozenset({"window", "saving_pct", "saving_ms"})
    json_spread = frozenset({"extra"})

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

    @property
    def reported_saving_pct(self) -> float:
        """The saving as every report gives it: to 0.01% of the step (the JSON's figure)."""
        return round(self.saving_pct, 2)

    @property
    def reported_saving_ms(self) -> float:
        """The saving per step as every report gives it: to the µs (the JSON's figure)."""
        return round(self.saving_ms, 3)

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


#: A finding that saves less than this share of a step (rounds to "~0%") is shown folded, in one
#: line, unless it is high severity (a risk, such as memory pressure, whose saving is not time).
MINOR_SAVING_PCT = 0.5


def is_minor(saving_pct: float | None, severity: str) -> bool:
    """Whether a finding's saving is too small for a full card (reports fold it to one line)."""
    return (saving_pct or 0.0) < MINOR_SAVING_PCT and severity != "high"


def ranked(findings: list[Finding]) -> list[Finding]:
    """Most costly first; ties broken by severity, then the finding whose saving another
    shares before that one, then by id for a stable order."""
    return sorted(
        findings,
        key=lambda f: (-round(f.saving_pct, 2), SEVERITY_ORDER[f.severity],
                       SHARED_WITH in f.extra, f.id, -1 if f.rank is None else f.rank),
    )


#: The severity of a finding is its saving's (% of the step): high from the first threshold,
#: medium from the second, else low. One table for every rule (docs/rules.md#severity), except
#: the rules in RISK_SEVERITY.
SAVING_SEVERITY: tuple[tuple[float, Severity], ...] = ((20.0, "high"), (5.0, "medium"))
#: Rules whose severity is a risk (an out-of-memory error, a leak), not time: their saving is 0
#: and they keep the severity the rule gives.
RISK_SEVERITY = frozenset({"memory_pressure", "memory_growth"})
#: The JSON field of a finding whose saving is the same time as an earlier finding's: that
#: finding's id (diagnose/savings.py); its own saving is then not counted in a total.
SHARED_WITH = "saving_shared_with"
#: The JSON field of a job's finding reported on a rank that is not the job's slowest: the
#: slowest rank (the job runs at its pace, so a saving elsewhere may not shorten the job).
SLOWEST_RANK = "slowest_rank"
#: The JSON field that says what capped a saving: "critical_path", "step" (the rank's savings
#: before it already fill the step), or both, comma separated.
CAPPED_BY = "saving_capped_by"


def saving_severity(saving_pct: float) -> Severity:
    """The severity of a saving, by SAVING_SEVERITY."""
    for threshold, sev in SAVING_SEVERITY:
        if saving_pct >= threshold:
            return sev
    return "low"


def capped(f: Finding, by: str) -> None:
    """Note in the finding that ``by`` capped its saving."""
    was = f.extra.get(CAPPED_BY)
    f.extra[CAPPED_BY] = by if not was or by in was.split(", ") else f"{was}, {by}"


def saving_phrase(saving_pct: float | None, saving_ms: float | None,
                  shared_number: int | None = None) -> str:
    """"saves ~12% (3.4 ms/step)", or for a finding whose saving is an earlier one's time
    "saves the same time as finding 2" (every renderer says it the same way)."""
    if shared_number is not None:
        return f"saves the same time as finding {shared_number}"
    pct = "?" if saving_pct is None else f"{saving_pct:.0f}"
    ms = "?" if saving_ms is None else f"{saving_ms:.1f}"
    return f"saves ~{pct}% ({ms} ms/step)"


def where_text(rank: int, extra: dict[str, Any]) -> str:
    """"rank 3", or "rank 3 (not the slowest: rank 5)" for a job's finding on a rank that does
    not set the job's pace (``extra``: the finding's extra fields, or its JSON)."""
    slowest = extra.get(SLOWEST_RANK)
    return f"rank {rank}" + ("" if slowest is None else f" (not the slowest: rank {slowest})")


def shared_number(f: Finding | dict[str, Any], findings: list[Any]) -> int | None:
    """The report number (1-based) of the finding whose saving ``f`` shares, if any."""
    extra = f if isinstance(f, dict) else f.extra
    other = extra.get(SHARED_WITH)
    if not other:
        return None
    ids = [x["id"] if isinstance(x, dict) else x.id for x in findings]
    return ids.index(other) + 1 if other in ids else None


def typed_findings(findings: list[Any]) -> list[Finding]:
    """An analysis's findings as ``Finding``s (a result read back from JSON holds their JSON
    objects: ``analysis/decode.py``)."""
    out = []
    for i, f in enumerate(findings, 1):
        try:
            out.append(f if isinstance(f, Finding) else Finding.from_dict(f))
        except (TypeError, ValueError, AttributeError) as exc:
            raise TraceError(f"Finding {i} of the saved result does not read: {exc}.") from None
    return out


class Findings(NotebookDisplay, list):
    """The findings of an analysis, most costly first: a list that shows as a table in a
    notebook."""

    def to_pandas(self) -> Any:
        """One row per finding: rank, id, severity, saving (% of the step, ms per step), the
        finding whose saving it shares (docs/rules.md#savings), title."""
        return data_frame([{"rank": f.rank, "window": f.window, "id": f.id,
                            "severity": str(f.severity), "saving_pct": f.saving_pct,
                            "saving_ms": f.saving_ms,
                            "saving_shared_with": f.extra.get(SHARED_WITH),
                            "title": f.title} for f in self])
