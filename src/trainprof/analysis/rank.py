"""The analysis of one loaded trace: its steps, breakdown, phases, GPU figures and deep
sections (``analyze_trace``). Folders, executors and clusters are analysis/overview.py's."""

from __future__ import annotations

from typing import Any

from trainprof.analysis.breakdown import step_breakdown
from trainprof.analysis.gpu import gpu_figures
from trainprof.analysis.phases import phase_percentages, step_phases
from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.sections import run_sections
from trainprof.analysis.steps import find_steps, step_stats
from trainprof.analysis.timeline import gpu_timeline
from trainprof.trace.load import rank_in_trace
from trainprof.trace.model import Trace


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


