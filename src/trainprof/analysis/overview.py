"""The per-rank overview and the ``analyze`` entry point of the Python API."""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainprof.analysis.breakdown import step_breakdown
from trainprof.analysis.frames import data_frame
from trainprof.analysis.gpu import GpuFigures, gpu_figures
from trainprof.analysis.phases import phase_percentages, step_phases
from trainprof.analysis.sections import run_job_sections, run_sections
from trainprof.analysis.steps import find_steps, step_stats
from trainprof.analysis.timeline import Timeline, gpu_timeline
from trainprof.display import NotebookDisplay
from trainprof.trace import discover
from trainprof.trace.load import Progress, rank_in_trace
from trainprof.trace.model import Trace

SCHEMA = "trainprof.analysis/1"


@dataclass(repr=False)
class RankAnalysis(NotebookDisplay):
    """The overview of one recorded window of one rank."""

    rank: int
    window: int
    path: Path
    device: str
    steps: dict[str, Any]
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
    #: Deep-analysis results by section name (analysis/sections.py).
    sections: dict[str, Any] = field(default_factory=dict)
    #: The rank's own findings (dicts) when it was read from a cluster summary: the rank rules
    #: ran where the trace was and do not run again (analysis/summary.py).
    findings: list[dict[str, Any]] | None = None

    @property
    def gpu(self) -> GpuFigures | None:
        """The figures of the busiest device (most ranks use exactly one)."""
        return max(self.gpus, key=lambda g: g.utilization_pct) if self.gpus else None

    def to_dict(self) -> dict[str, Any]:
        gpu = self.gpu
        return {
            "rank": self.rank,
            "window": self.window,
            "file": self.path.name,
            "device": self.device,
            "steps": {**self.steps, "source": self.step_source},
            "breakdown_pct": self.breakdown_pct,
            "breakdown_ms": self.breakdown_ms,
            "phases_pct": self.phases_pct,
            "phases_ms": self.phases_ms,
            "gpu": None if gpu is None else _without(gpu.to_dict(), "device"),
            "gpus": [g.to_dict() for g in self.gpus],
            "timeline": None if self.timeline is None else self.timeline.to_dict(),
            "environment": self.environment,
            "notes": self.notes,
            **{name: result.to_dict() for name, result in self.sections.items()},
        }

    def to_pandas(self) -> Any:
        """One row per step: the step number and its time in ms."""
        return data_frame([{"rank": self.rank, "window": self.window, **row}
                           for row in self.steps.get("per_step", [])])


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


@dataclass(repr=False)
class Analysis(NotebookDisplay):
    """The result of ``trainprof.analyze``: one ``RankAnalysis`` per rank and window."""

    ranks: list[RankAnalysis]
    findings: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str = ""
    #: Job-level results by section name (analysis/sections.py JOB_SECTIONS).
    job: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": self.source,
            "ranks": [r.to_dict() for r in self.ranks],
            "findings": [f.to_dict() if hasattr(f, "to_dict") else f for f in self.findings],
            "notes": self.notes,
            "job": {name: result.to_dict() for name, result in self.job.items()},
        }

    def to_pandas(self) -> Any:
        """One row per rank and window: step time, phase shares and GPU figures."""
        rows = []
        for r in self.ranks:
            gpu = r.gpu.to_dict() if r.gpu is not None else {}
            rows.append({"rank": r.rank, "window": r.window, "device": r.device,
                         "steps": r.steps.get("count"), "median_ms": r.steps.get("median_ms"),
                         "mean_ms": r.steps.get("mean_ms"), "p90_ms": r.steps.get("p90_ms"),
                         **{f"{k}_pct": v for k, v in r.phases_pct.items()},
                         "gpu_utilization_pct": gpu.get("utilization_pct"),
                         "tensor_core_pct": gpu.get("tensor_core_pct")})
        return data_frame(rows)


def analyze_trace(trace: Trace) -> RankAnalysis:
    """The overview of one loaded trace."""
    steps = find_steps(trace)
    breakdown = step_breakdown(trace, steps)
    phases = step_phases(trace, steps)
    n = max(len(steps), 1)
    return RankAnalysis(
        rank=trace.rank,
        window=trace.window,
        path=trace.path,
        device=trace.device_name(),
        steps=step_stats(steps),
        step_source=steps.source,
        breakdown_pct=breakdown.percentages(),
        breakdown_ms=breakdown.mean_ms(),
        phases_pct=phase_percentages(phases, breakdown.step_us),
        phases_ms={p: float(v.sum()) / n / 1000.0 for p, v in phases.items()},
        gpus=gpu_figures(trace, steps),
        timeline=gpu_timeline(trace, steps),
        environment=environment(trace),
        notes=[*trace.notes, *steps.notes],
        rank_in_trace=rank_in_trace(trace),
        sections=run_sections(trace, steps),
    )


#: Versions a trace may record at its top level (newer Kineto exports record the CUDA and
#: CUPTI ones; ``pytorch_version`` when the recording tool added it); None when absent.
RECORDED_VERSIONS = ("pytorch_version", "cuda_runtime_version", "cuda_driver_version",
                     "cupti_version")


def environment(trace: Trace) -> dict[str, Any]:
    """What the trace says about where it was recorded."""
    info = trace.metadata.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    return {
        "devices": [
            {k: p.get(k) for k in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor",
                                   "numSms")}
            for p in trace.device_properties
        ],
        "world_size": info.get("world_size"),
        "backend": info.get("backend"),
        "schema_version": trace.metadata.get("schemaVersion"),
        **{key: trace.metadata.get(key) for key in RECORDED_VERSIONS},
    }


def analyze(
    source: str | os.PathLike[str] | Iterable[Trace], progress: Progress | None = None,
    workers: int | None = None, executor: Executor | None = None,
) -> Analysis:
    """Analyse a trace file, a folder of ranks (traces and cluster summaries), or already
    loaded traces. A folder's traces are analysed in ``workers`` processes (None: as many as
    the cores and the memory allow; 1: in this process; analysis/parallel.py), or as tasks on
    ``executor`` when one is given (analysis/on_executor.py).

    Raises ``trainprof.TraceError`` when the input cannot be read as Kineto traces.
    """
    summarised = None
    if isinstance(source, str | os.PathLike):
        from trainprof.analysis.inputs import analyze_path

        results, summarised = analyze_path(Path(source), progress, workers, executor)
        label = str(source)
    else:
        results = [analyze_trace(t) for t in source]
        label = ""
    notes: list[str] = []
    if results:
        placements, notes = discover.place(
            [r.path for r in results], [r.rank_in_trace for r in results]
        )
        for r, p in zip(results, placements, strict=True):
            r.rank, r.window = p.rank, p.window
    if summarised is not None:
        from trainprof.analysis.inputs import add_summarised

        notes += add_summarised(results, summarised)
    if not results:
        from trainprof.errors import TraceError

        skipped = " (the files skipped above are not traces)" if Path(label).is_dir() else ""
        raise TraceError(f"{label or 'The input'} holds no Kineto traces{skipped}.")
    results.sort(key=lambda r: (r.rank, r.window))
    return Analysis(ranks=results, notes=notes, source=label, job=run_job_sections(results))
