"""The analysis result's data model: one ``RankAnalysis`` per rank and window, and the
``Analysis`` of a job. A leaf of the analysis package (it imports no analysis that runs), so that
every layer can name these types without importing the pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.overview.gpu import GpuFigures
from trainprof.analysis.overview.steps import StepStats
from trainprof.analysis.overview.timeline import Timeline
from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.display import NotebookDisplay
from trainprof.structs import Derived, Record, replace

SCHEMA = "trainprof.analysis/1"


class RankAnalysis(NotebookDisplay, Record):
    """The overview of one recorded window of one rank. Its JSON (``ranks[i]`` of the result):
    the file's name for the path, the steps with their source, the busiest device's figures as
    ``gpu``, and its sections beside its figures."""

    json_derived = (Derived("file", "window", attr="file_name"),
                    Derived("steps", "device", attr="steps_with_source"),
                    Derived("gpu", "phases_ms", attr="busiest_gpu"))
    json_internal = frozenset({"path", "steps", "step_source", "rank_in_trace", "started_us",
                               "findings", "path_bounds"})
    json_spread = frozenset({"sections"})

    rank: int
    window: int
    path: Path
    device: str
    steps: StepStats
    step_source: str
    breakdown_pct: dict[str, float]
    breakdown_ms: dict[str, float]
    phases_pct: dict[str, float]
    phases_ms: dict[str, float]
    gpus: list[GpuFigures]
    timeline: Timeline | None
    environment: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    rank_in_trace: int | None = None
    #: When the recording started, µs of the trace's own clock (Kineto: since the epoch); None
    #: for a rank read from a cluster summary. Not in the JSON result: it tells apart traces
    #: that cannot be one job (analysis/job/one_job.py).
    started_us: float | None = None
    #: Deep-analysis results, one attribute per section (analysis/sections/registry.py).
    sections: RankSections = field(default_factory=RankSections)
    #: The rank's own findings (dicts) when it was read from a cluster summary: the rank rules
    #: ran where the trace was and do not run again (analysis/job/summary.py).
    findings: list[dict[str, Any]] | None = None
    #: The critical path's bounds on the job rules' savings (finding id -> (% of the step, what
    #: bounds it)) when the path is not kept: a rank read from a cluster summary
    #: (diagnose/path_bounds.py).
    path_bounds: dict[str, tuple[float, str]] | None = None

    @property
    def gpu(self) -> GpuFigures | None:
        """The figures of the busiest device (most ranks use exactly one)."""
        return max(self.gpus, key=lambda g: g.utilization_pct) if self.gpus else None

    @property
    def file_name(self) -> str:
        return self.path.name

    @property
    def steps_with_source(self) -> dict[str, Any]:
        """The steps' JSON, with where they came from (``source``)."""
        return {**self.steps.to_dict(), "source": self.step_source}

    @property
    def busiest_gpu(self) -> dict[str, Any] | None:
        """``gpu``'s JSON without its device (the JSON's ``gpu``; ``gpus`` names them)."""
        gpu = self.gpu
        return None if gpu is None else _without(gpu.to_dict(), "device")

    def to_pandas(self) -> Any:
        """One row per step: the step number and its time in ms."""
        return data_frame([{"rank": self.rank, "window": self.window, **row}
                           for row in self.steps.per_step])


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


class Analysis(NotebookDisplay, Record):
    """The result of ``trainprof.analyze``: one ``RankAnalysis`` per rank and window. Its JSON
    opens with the schema and the source."""

    json_derived = (Derived("schema", "", attr="schema"), Derived("source", "schema"))
    json_internal = frozenset({"source", "options"})

    ranks: list[RankAnalysis]
    findings: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str = ""
    #: Job-level results, one attribute per section (analysis/sections/registry.py JOB_SECTIONS).
    job: JobSections = field(default_factory=JobSections)
    #: The options it was made with (``trainprof.analyze``'s): the renderers read their rows
    #: per table, the module tree and every rank's row from them. Not in the JSON result; a
    #: saved result read back has the defaults, or the options of the command reading it.
    options: AnalyzeOptions = field(default_factory=AnalyzeOptions)

    @property
    def schema(self) -> str:
        return SCHEMA

    def to_dict_without_ranks(self) -> dict[str, Any]:
        """``to_dict()`` with ``ranks`` left empty, in the same key order (the JSON writer
        adds the ranks one at a time: report/json.py)."""
        return replace(self, ranks=[]).to_dict()

    def to_pandas(self) -> Any:
        """One row per rank and window: step time, phase shares and GPU figures."""
        rows = []
        for r in self.ranks:
            gpu = r.gpu.to_dict() if r.gpu is not None else {}
            rows.append({"rank": r.rank, "window": r.window, "device": r.device,
                         "steps": r.steps.count, "median_ms": r.steps.median_ms,
                         "mean_ms": r.steps.mean_ms, "p90_ms": r.steps.p90_ms,
                         **{f"{k}_pct": v for k, v in r.phases_pct.items()},
                         "gpu_utilization_pct": gpu.get("utilization_pct"),
                         "tensor_core_pct": gpu.get("tensor_core_pct")})
        return data_frame(rows)


