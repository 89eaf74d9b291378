"""Terminal views of the parallelism sections (docs/parallelism.md): what a rank shows of the
job's parallelism with its FSDP layers, and the pipeline's stages."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from trainprof.analysis.parallelism.pipeline import Pipeline
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.report.quantities import add_name_column, add_number_columns, compact_table, pct
from trainprof.report.terminal.model_parallel import tensor_layers

#: FSDP layers shown, the most exposed first.
LAYER_ROWS = 8
_NAMES = {"fsdp": "FSDP", "pipeline": "pipeline", "tensor": "tensor parallel",
          "expert": "expert parallel", "ddp": "DDP"}


def render_parallelism(result: Parallelism) -> Group | None:
    if not result.kinds:
        return None
    lines = [Text("Parallelism: " + " + ".join(_NAMES[k] for k in result.kinds), style="bold")]
    lines += [Text(f"  {_NAMES[k]}: {result.evidence[k]}") for k in result.kinds]
    if result.process_groups:
        groups = "; ".join(f"{g.name} ({g.description}, {g.size} ranks)"
                           for g in result.process_groups)
        lines.append(Text(f"  process groups: {groups}", style="dim"))
    parts: list[Text | Table] = [*lines]
    if result.layers:
        parts.append(_layers(result))
    if (tp := tensor_layers(result)) is not None:
        parts.append(tp)
    if result.expert is not None:
        e = result.expert
        parts.append(Text(f"  all-to-all {e.all_to_all_ms:.2f} ms/step, "
                          f"{e.exposed_ms:.2f} exposed ({e.hidden_pct:.0f}% beside compute)"))
    return Group(*parts)


def _layers(result: Parallelism) -> Table:
    t = compact_table("FSDP layers: all-gathers (AG) and reduce-scatters (RS) with no compute "
                      "running, ms per step; ahead: prefetch distance, forward/backward")
    add_name_column(t, "layer", 32)
    add_number_columns(t, "AG fwd", "AG bwd", "RS", "AG/step", "ahead")
    for x in sorted(result.layers, key=lambda x: -x.exposed_ms)[:LAYER_ROWS]:
        t.add_row(x.label, f"{x.forward_gather_ms:.2f}",
                  f"{x.backward_gather_ms:.2f}", f"{x.reduce_scatter_ms:.2f}",
                  f"{x.gathers_per_step:.0f}",
                  "/".join("-" if d is None else f"{d:g}" for d in
                           (x.forward_prefetch_distance, x.backward_prefetch_distance)))
    q = result.fsdp_queues
    if q is not None and q.serialised is not None:
        t.caption = ("all-gathers and reduce-scatters serialised (never at once)" if q.serialised
                     else "all-gathers and reduce-scatters run at once")
    return t


def render_pipeline(result: Pipeline) -> Table | None:
    if not result.stages:
        return None
    bubble = result.ideal_bubble_pct
    heavy = result.heaviest
    title = (f"Pipeline: {len(result.stages)} stages, {result.micro_batches or '?'} "
             f"micro-batches ({result.schedule or 'schedule unknown'}); ideal bubble "
             f"{pct(bubble)}")
    if heavy is not None:
        title += (f"; stage {heavy.stage} computes {result.imbalance_pct:.0f}% over the mean "
                  f"(balanced saves {result.imbalance_saving_ms:.1f} ms/step)")
    t = compact_table(title)
    for col in ("stage", "rank", "compute ms", "step ms", "waiting ms", "warm-up", "steady",
                "cool-down", "idle", ""):
        t.add_column(col, justify="left" if col in ("stage", "") else "right")
    for s in result.stages:
        t.add_row(f"{s.stage}", f"{s.rank}", f"{s.compute_ms:.1f}", f"{s.step_ms:.1f}",
                  f"{s.waiting_ms:.1f}", *(f"{x:.1f}" for x in s.phases_ms), pct(s.idle_pct),
                  "heaviest" if s is heavy else "")
    return t
