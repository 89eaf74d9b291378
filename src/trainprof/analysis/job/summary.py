"""A rank's compact summary (a few KB), and a light ``RankAnalysis`` rebuilt from one.

A summary keeps what the job-level view needs: step times, the breakdown and the phases, the
GPU figures, communication with every collective instance (for matching across ranks), the
parallelism section (the pipeline stages and the kinds the job-level rules fit their fixes to),
notes, and the rank's own findings. Numbers are kept exactly, so the job-level results (stragglers,
the per-rank table) computed from summaries equal those computed from the traces. The format
is typed (msgspec structs), so a malformed file is told in one sentence. docs/distributed.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from trainprof.analysis.overview.gpu import GpuFigures
from trainprof.analysis.overview.steps import StepStats
from trainprof.analysis.overview.timeline import Timeline
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.section_results import RankSections
from trainprof.analysis.sections.communication import (
    CollectiveType,
    Communication,
    Instances,
    Totals,
)
from trainprof.structs import fields, shallow_dict
from trainprof.trace.model import COLLECTIVE_TYPES


class StepTime(msgspec.Struct):
    step: int
    ms: float


class StepSummary(StepStats):
    """``analysis.overview.steps.step_stats`` plus the step source."""

    source: str = ""


class InstanceColumns(msgspec.Struct):
    """Each collective once, as columns; ``type`` indexes ``names``; starts from ``origin_us``."""

    names: list[str]
    type: list[int]
    step: list[int]
    origin_us: float
    start_us: list[float]
    dur_us: list[float]
    #: Absolute end of each instance's step (None: outside every step or unknown); empty in
    #: summaries written before it was kept.
    step_end_us: list[float | None] = []


class CollectiveTypeSummary(msgspec.Struct):
    """``CollectiveType``, its bytes 0 where none was sized."""

    type: str
    count: int
    sized: int
    bytes: float
    time_us: float
    busy_us: float
    exposed_us: float


class CommunicationSummary(msgspec.Struct):
    """``Communication`` by its exact totals."""

    source: str
    backend: str | None
    window_us: float
    steps: int
    types: list[CollectiveTypeSummary]
    busy_us: float
    exposed_us: float
    per_step_ms: list[float]
    instances: InstanceColumns
    notes: list[str] = []


class EvidenceRecord(msgspec.Struct):
    what: str
    value: float | str
    unit: str = ""
    where: str = ""


class FixRecord(msgspec.Struct):
    summary: str
    pytorch: str = ""
    accelerate: str = ""


class FindingRecord(msgspec.Struct):
    """The shape a stored finding (``Finding.to_dict()``) must have; other keys pass."""

    id: str
    severity: Literal["high", "medium", "low"]
    rank: int | None
    title: str
    explanation: str
    evidence: list[EvidenceRecord]
    saving_pct: float
    saving_ms: float
    saving_assumption: str
    fix: FixRecord
    window: int = 0


class RankSummary(msgspec.Struct):
    """One recording window of one rank."""

    rank: int
    window: int
    file: str
    device: str
    steps: StepSummary
    breakdown_ms: dict[str, float]
    breakdown_pct: dict[str, float]
    phases_ms: dict[str, float]
    phases_pct: dict[str, float]
    gpus: list[GpuFigures]
    timeline: Timeline | None
    environment: dict[str, Any]
    communication: CommunicationSummary | None
    notes: list[str] = []
    #: The rank's own findings (``Finding.to_dict()``), found where the trace was.
    findings: list[dict[str, Any]] = []
    #: The critical path's bounds on the job rules' savings (diagnose/path_bounds.py): the
    #: path itself is not kept.
    path_bounds: dict[str, tuple[float, str]] = {}
    #: The rank's parallelism section (docs/parallelism.md), whole.
    parallelism: Parallelism | None = None


def rank_summary(r: RankAnalysis, findings: list[dict[str, Any]] | None = None,
                 path_bounds: dict[str, tuple[float, str]] | None = None) -> RankSummary:
    """The compact summary of one analysed rank and window."""
    comm = r.sections.communication
    summary = RankSummary(
        rank=r.rank, window=r.window, file=r.path.name, device=r.device,
        steps=msgspec.convert({**r.steps.to_dict(), "source": r.step_source}, StepSummary),
        breakdown_ms=r.breakdown_ms, breakdown_pct=r.breakdown_pct,
        phases_ms=r.phases_ms, phases_pct=r.phases_pct,
        gpus=list(r.gpus), timeline=r.timeline, environment=r.environment,
        communication=None if comm is None else _communication(comm),
        notes=list(r.notes), findings=list(findings or []), path_bounds=dict(path_bounds or {}),
        parallelism=r.sections.parallelism,
    )
    # Through JSON and back: numpy scalars become plain numbers, and the result is validated.
    return msgspec.json.decode(encode(summary), type=RankSummary)


def encode(value: Any) -> bytes:
    """Compact JSON of a summary (or anything holding numpy scalars)."""
    return msgspec.json.encode(value, enc_hook=_numpy_plain)


def _numpy_plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} in a summary")


def _communication(c: Communication) -> CommunicationSummary:
    inst = c.instances
    origin = float(inst.start_us.min()) if len(inst) else 0.0
    if not np.array_equal(origin + (inst.start_us - origin), inst.start_us):
        origin = 0.0  # keep starts exact: relative ones only where they add back exactly
    totals = c.totals
    return CommunicationSummary(
        source=c.source, backend=c.backend, window_us=float(totals.window_us), steps=c.steps,
        types=[CollectiveTypeSummary(**{**_without_steps(t), "bytes": t.bytes or 0.0})
               for t in c.types],
        busy_us=float(totals.busy_us), exposed_us=float(totals.exposed_us),
        per_step_ms=[float(x) for x in c.per_step_ms],
        instances=InstanceColumns(
            names=list(COLLECTIVE_TYPES), type=inst.type.tolist(), step=inst.step.tolist(),
            origin_us=origin, start_us=(inst.start_us - origin).tolist(),
            dur_us=inst.dur_us.tolist(),
            step_end_us=[float(x) if np.isfinite(x) else None for x in inst.step_ends()]),
        notes=list(c.notes),
    )


def _without_steps(t: CollectiveType) -> dict[str, Any]:
    """A collective type's fields but its section's step count (the summary keeps it once)."""
    return {k: v for k, v in shallow_dict(t).items() if k != "steps"}


def rank_from_summary(s: RankSummary, source: Path) -> RankAnalysis:
    """A ``RankAnalysis`` with the summary's figures; deep sections other than communication
    are absent, and ``findings`` holds the rank's own findings."""
    for f in s.findings:
        msgspec.convert(f, FindingRecord)  # a malformed one fails here, not in a report
    sections = RankSections(
        communication=None if s.communication is None else _rebuilt(s.communication),
        parallelism=s.parallelism)
    return RankAnalysis(
        rank=s.rank, window=s.window, path=Path(s.file), device=s.device,
        steps=StepStats(**{f.name: getattr(s.steps, f.name) for f in fields(StepStats)}),
        step_source=s.steps.source, breakdown_pct=dict(s.breakdown_pct),
        breakdown_ms=dict(s.breakdown_ms), phases_pct=dict(s.phases_pct),
        phases_ms=dict(s.phases_ms), gpus=list(s.gpus), timeline=s.timeline,
        environment=dict(s.environment),
        notes=[*s.notes, f"Read from {source.name} (a summary: the deep analyses need the trace)."],
        rank_in_trace=s.rank, sections=sections, findings=list(s.findings),
        path_bounds={k: (float(v[0]), str(v[1])) for k, v in s.path_bounds.items()},
    )


def _rebuilt(c: CommunicationSummary) -> Communication:
    i = c.instances
    codes = {name: COLLECTIVE_TYPES.index(name) if name in COLLECTIVE_TYPES
             else COLLECTIVE_TYPES.index("other") for name in i.names}
    if not len(i.type) == len(i.step) == len(i.start_us) == len(i.dur_us) or (
            i.type and not 0 <= min(i.type) <= max(i.type) < len(i.names)) or (
            i.step_end_us and len(i.step_end_us) != len(i.type)):
        raise msgspec.ValidationError("the collective instance columns do not agree")
    lookup = np.array([codes[name] for name in i.names] or [0], dtype=np.int64)
    instances = Instances(
        type=lookup[np.asarray(i.type, dtype=np.int64)],
        step=np.asarray(i.step, dtype=np.int64),
        start_us=i.origin_us + np.asarray(i.start_us, dtype=np.float64),
        dur_us=np.asarray(i.dur_us, dtype=np.float64),
        step_end_us=np.array([np.inf if x is None else x for x in i.step_end_us],
                             dtype=np.float64) if i.step_end_us else None,
    )
    return Communication.of(
        source=c.source, backend=c.backend, steps=c.steps,
        totals=Totals(window_us=c.window_us, busy_us=c.busy_us, exposed_us=c.exposed_us),
        types=[CollectiveType(**{**shallow_dict(t), "bytes": t.bytes if t.sized else None})
               for t in c.types],
        per_step_ms=list(c.per_step_ms), instances=instances, notes=list(c.notes),
    )
