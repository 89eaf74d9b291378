"""The HTML report's parallelism tables (docs/parallelism.md): a rank's FSDP layers and the
pipeline's stages, from their records; cells are escaped by the template."""

from __future__ import annotations

from trainprof.analysis.parallelism.pipeline import Pipeline
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.report.html.tables import Column, Table, num, text

#: FSDP layers listed (the table sorts).
LAYER_ROWS = 16


def parallelism_table(p: Parallelism | None) -> Table | None:
    """The kinds of parallelism a rank shows, with the evidence for each."""
    if p is None or not p.kinds:
        return None
    table = Table([Column("parallelism", numeric=False), Column("seen as", numeric=False)],
                  sortable=False)
    table.rows = [[text(k), text(p.evidence.get(k, ""))] for k in p.kinds]
    table.rows += [[text("process group"), text(f"{g.name} ({g.description}, {g.size} ranks)")]
                   for g in p.process_groups]
    return table


def fsdp_layers_table(p: Parallelism | None) -> Table | None:
    layers = p.layers if p is not None else []
    if not layers:
        return None
    cols = [Column("layer", numeric=False),
            Column("all-gather forward", title="ms per step with no compute running"),
            Column("all-gather backward", title="ms per step with no compute running"),
            Column("reduce-scatter", title="ms per step with no compute running"),
            Column("gathers/step"),
            Column("prefetch forward", title="layers ahead its all-gathers are issued"),
            Column("prefetch backward", title="layers ahead its all-gathers are issued")]
    table = Table(cols, caption="FSDP layers: communication with no compute running")
    table.rows = [[text(x.label), num(x.forward_gather_ms, 2),
                   num(x.backward_gather_ms, 2), num(x.reduce_scatter_ms, 2),
                   num(x.gathers_per_step, 0), num(x.forward_prefetch_distance, 1),
                   num(x.backward_prefetch_distance, 1)] for x in layers[:LAYER_ROWS]]
    return table


def pipeline_table(pipe: Pipeline | None) -> Table | None:
    stages = pipe.stages if pipe is not None else []
    if pipe is None or not stages:
        return None
    cols = [Column("stage"), Column("rank"), Column("compute ms", title="per step (median)"),
            Column("step ms"), Column("waiting ms", title="send/recv with no compute running"),
            Column("warm-up", title="waiting until the first forward micro-batch ends"),
            Column("steady", title="waiting between warm-up and cool-down"),
            Column("cool-down", title="waiting from the start of the last backward micro-batch"),
            Column("idle", title="share of the step the stage does not compute")]
    caption = (f"{pipe.micro_batches or '?'} micro-batches "
               f"({pipe.schedule or 'schedule unknown'}); ideal bubble "
               f"{_pct(pipe.ideal_bubble_pct)}; balanced stages save "
               f"{pipe.imbalance_saving_ms:.1f} ms per step")
    table = Table(cols, caption=caption)
    table.rows = [[num(s.stage, 0), num(s.rank, 0), num(s.compute_ms, 1), num(s.step_ms, 1),
                   num(s.waiting_ms, 1), num(s.warmup_wait_ms, 1), num(s.steady_wait_ms, 1),
                   num(s.cooldown_wait_ms, 1), num(s.idle_pct, 1, "%")]
                  for s in stages]
    return table


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"
