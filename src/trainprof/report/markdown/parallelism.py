"""Markdown of the parallelism sections (docs/parallelism.md): the kinds a rank shows, its FSDP
layers, the pipeline's stages, from their records; every trace string goes through md_text."""

from __future__ import annotations

from trainprof.analysis.parallelism.pipeline import Pipeline
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.formatting import number
from trainprof.report.markdown.text import md_text, table

#: FSDP layers listed, the most exposed first.
LAYER_ROWS = 8


def parallelism_md(rank: Parallelism | None, pipeline: Pipeline | None) -> str:
    """The section's Markdown, or "" when the job shows no parallelism."""
    out = []
    if rank is not None and rank.kinds:
        out += [f"- {md_text(k)}: {md_text(rank.evidence.get(k, ''), None)}" for k in rank.kinds]
        out += [f"- process group {md_text(g.name)} ({md_text(g.description)}, {g.size} ranks)"
                for g in rank.process_groups]
        out.append("")
    layers = sorted(rank.layers if rank is not None else [], key=lambda x: x.exposed_ms,
                    reverse=True)
    if layers:
        rows = [[md_text(x.label), number(x.forward_gather_ms, 2),
                 number(x.backward_gather_ms, 2), number(x.reduce_scatter_ms, 2),
                 number(x.forward_prefetch_distance, 1), number(x.backward_prefetch_distance, 1)]
                for x in layers[:LAYER_ROWS]]
        out += ["FSDP layers: communication with no compute running (ms per step), and how "
                "many layers ahead each all-gather is issued (prefetch distance)", "",
                table(["layer", "all-gather forward", "all-gather backward", "reduce-scatter",
                       "prefetch forward", "prefetch backward"], rows, "lrrrrr"), ""]
    if pipeline is not None and pipeline.stages:
        out += [f"Pipeline: {len(pipeline.stages)} stages, "
                f"{pipeline.micro_batches or '?'} micro-batches "
                f"({md_text(pipeline.schedule or 'schedule unknown')}), ideal bubble "
                f"{number(pipeline.ideal_bubble_pct, 1, '%')}, balanced stages save "
                f"{number(pipeline.imbalance_saving_ms, 1)} ms per step", ""]
        rows = [[str(s.stage), str(s.rank), number(s.compute_ms, 1), number(s.step_ms, 1),
                 number(s.waiting_ms, 1), number(s.warmup_wait_ms, 1),
                 number(s.steady_wait_ms, 1), number(s.cooldown_wait_ms, 1),
                 number(s.idle_pct, 1, "%")] for s in pipeline.stages]
        out += [table(["stage", "rank", "compute ms", "step ms", "waiting ms", "warm-up",
                       "steady", "cool-down", "idle"], rows, "rrrrrrrrr"), ""]
    return "\n".join(out).rstrip()
