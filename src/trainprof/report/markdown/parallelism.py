"""Markdown of the parallelism sections (docs/parallelism.md): the kinds a rank shows, its FSDP
layers, the pipeline's stages. Reads the JSON form; every trace string goes through md_text."""

from __future__ import annotations

from typing import Any

from trainprof.formatting import number
from trainprof.report.markdown.text import md_text, table

#: FSDP layers listed, the most exposed first.
LAYER_ROWS = 8


def parallelism_md(rank: dict[str, Any] | None, pipeline: dict[str, Any] | None) -> str:
    """The section's Markdown, or "" when the job shows no parallelism."""
    out = []
    if rank and rank.get("kinds"):
        out += [f"- {md_text(k)}: {md_text(rank['evidence'].get(k, ''), None)}"
                for k in rank["kinds"]]
        out += [f"- process group {md_text(g['name'])} ({md_text(g['description'])}, "
                f"{g['size']} ranks)" for g in rank.get("process_groups", [])]
        out.append("")
    layers = sorted((rank or {}).get("fsdp_layers") or [], key=_exposed, reverse=True)
    if layers:
        rows = [[md_text(x["layer"]), number(x["forward_all_gather_exposed_ms_per_step"], 2),
                 number(x["backward_all_gather_exposed_ms_per_step"], 2),
                 number(x["reduce_scatter_exposed_ms_per_step"], 2),
                 number(x.get("forward_prefetch_distance"), 1),
                 number(x.get("backward_prefetch_distance"), 1)]
                for x in layers[:LAYER_ROWS]]
        out += ["FSDP layers: communication with no compute running (ms per step), and how "
                "many layers ahead each all-gather is issued (prefetch distance)", "",
                table(["layer", "all-gather forward", "all-gather backward", "reduce-scatter",
                       "prefetch forward", "prefetch backward"], rows, "lrrrrr"), ""]
    if pipeline and pipeline.get("stages"):
        out += [f"Pipeline: {len(pipeline['stages'])} stages, "
                f"{pipeline.get('micro_batches') or '?'} micro-batches "
                f"({md_text(pipeline.get('schedule') or 'schedule unknown')}), ideal bubble "
                f"{number(pipeline.get('ideal_bubble_pct'), 1, '%')}, balanced stages save "
                f"{number(pipeline.get('imbalance_saving_ms'), 1)} ms per step", ""]
        rows = [[str(s["stage"]), str(s["rank"]), number(s["compute_ms"], 1),
                 number(s["step_ms"], 1), number(s["waiting_ms"], 1),
                 number(s["warmup_wait_ms"], 1), number(s["steady_wait_ms"], 1),
                 number(s["cooldown_wait_ms"], 1), number(s["idle_pct"], 1, "%")]
                for s in pipeline["stages"]]
        out += [table(["stage", "rank", "compute ms", "step ms", "waiting ms", "warm-up",
                       "steady", "cool-down", "idle"], rows, "rrrrrrrrr"), ""]
    return "\n".join(out).rstrip()


def _exposed(x: dict[str, Any]) -> float:
    return float(x["forward_all_gather_exposed_ms_per_step"]
                 + x["backward_all_gather_exposed_ms_per_step"]
                 + x["reduce_scatter_exposed_ms_per_step"])
