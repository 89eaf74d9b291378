"""The analysis of one loaded trace: its steps, breakdown, phases, GPU figures and deep
sections (``analyze_trace``). Folders, executors and clusters are analysis/analyze.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainprof.analysis.calls.attribution import device_links
from trainprof.analysis.calls.calltree import call_tree
from trainprof.analysis.options import AnalyzeOptions
from trainprof.analysis.overview.breakdown import BREAKDOWN
from trainprof.analysis.overview.exposure import window_sets
from trainprof.analysis.overview.gpu import gpu_figures
from trainprof.analysis.overview.phases import STEP_PHASES, phase_percentages
from trainprof.analysis.overview.steps import StepWindows, find_steps, step_stats
from trainprof.analysis.overview.timeline import gpu_timeline
from trainprof.analysis.parallel.section_workers import run_jobs, section_workers
from trainprof.analysis.results import RankAnalysis
from trainprof.analysis.section_results import RankSections
from trainprof.analysis.sections.registry import link_sections, run_sections, sections_for
from trainprof.analysis.streaming.windows import WindowedSection
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.load import rank_in_trace
from trainprof.trace.model import Trace


def analyze_trace(trace: Trace, workers: int | None = None,
                  options: AnalyzeOptions | None = None) -> RankAnalysis:
    """The overview of one loaded trace. ``workers``: processes computing its sections (None:
    one per core for a big trace, else 1; analysis/parallel/section_workers.py); ``options``:
    the analysis's (None: the defaults), which the sections are built from."""
    steps = find_steps(trace)
    if workers is None:
        workers = section_workers(trace)
    if workers <= 1:
        return overview(trace, steps, lambda section: section(trace, steps),
                        run_sections(trace, steps, options))
    # every section at once, in the serial run's order: the deep ones, then the overview's
    # in the order overview() asks for them (the forked children inherit the sections built)
    deep_sections = sections_for(options)
    jobs = [*deep_sections, *OVERVIEW_SECTIONS.items()]
    results = run_jobs(trace, steps, jobs, workers, prepare=shared_facts)
    deep = len(deep_sections)
    windowed = {id(fn): r for (_, fn), r in zip(jobs[deep:], results[deep:], strict=True)}
    sections = RankSections(**{name: r for (name, _), r in zip(deep_sections, results[:deep], strict=True)})
    return overview(trace, steps, lambda section: windowed[id(section)], sections)


def shared_facts(trace: Trace, steps: StepWindows) -> None:
    """Compute the facts several sections share, each cached on the trace (the call tree, the
    kernels' launch links, the step window's device activity, the kernel classes): run before
    the sections are shared among processes, so that every child inherits them rather than
    computing them again (1.1 s of the 9.8 s on the 1.1 GB trace)."""
    call_tree(trace)
    device_links(trace)
    window_sets(trace, steps)
    kernel_classes(trace)


#: The overview's figures that are computed over the steps' events, each a WindowedSection, in
#: the order ``overview`` asks for them.
OVERVIEW_SECTIONS: dict[str, WindowedSection] = {
    "breakdown": BREAKDOWN, "phases": STEP_PHASES, "gpus": gpu_figures, "timeline": gpu_timeline,
}


def overview(head: Trace, steps: StepWindows, run: Callable[[WindowedSection], Any],
             sections: RankSections, notes: list[str] | None = None) -> RankAnalysis:
    """A ``RankAnalysis`` from the trace's metadata (``head``: the trace, or any window of
    it), its steps, ``run`` (a windowed section's result, in memory or streamed) and the deep
    sections' results."""
    breakdown = run(BREAKDOWN)
    phases = run(STEP_PHASES)
    link_sections(sections)
    n = max(len(steps), 1)
    return RankAnalysis(
        rank=head.rank,
        window=head.window,
        path=head.path,
        device=head.device_name(),
        steps=step_stats(steps, breakdown.host_ops, breakdown.per_step),
        step_source=steps.source,
        breakdown_pct=breakdown.percentages(),
        breakdown_ms=breakdown.mean_ms(),
        phases_pct=phase_percentages(phases, breakdown.step_us),
        phases_ms={p: float(v.sum()) / n / 1000.0 for p, v in phases.items()},
        gpus=run(gpu_figures),
        timeline=run(gpu_timeline),
        environment=environment(head),
        notes=[*head.notes, *steps.notes, *(notes or [])],
        rank_in_trace=rank_in_trace(head),
        started_us=head.t0_us,
        sections=sections,
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


