"""The HTML report's parallelism tables (docs/parallelism.md): a rank's FSDP layers and the
pipeline's stages. Reads the JSON form; cells are escaped by the template."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.tables import Column, Table, num, text

#: FSDP layers listed (the table sorts).
LAYER_ROWS = 16


def parallelism_table(p: dict[str, Any]) -> Table | None:
    """The kinds of parallelism a rank shows, with the evidence for each."""
    if not p.get("kinds"):
        return None
    table = Table([Column("parallelism", numeric=False), Column("seen as", numeric=False)],
                  sortable=False)
    table.rows = [[text(k), text(p["evidence"].get(k, ""))] for k in p["kinds"]]
    table.rows += [[text("process group"), text(f"{g['name']} ({g['description']}, "
                                                f"{g['size']} ranks)")]
                   for g in p.get("process_groups", [])]
    return table


def fsdp_layers_table(p: dict[str, Any]) -> Table | None:
    layers = p.get("fsdp_layers") or []
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
    table.rows = [[text(x["layer"]), num(x["forward_all_gather_exposed_ms_per_step"], 2),
                   num(x["backward_all_gather_exposed_ms_per_step"], 2),
                   num(x["reduce_scatter_exposed_ms_per_step"], 2),
                   num(x["all_gathers_per_step"], 0),
                   num(x.get("forward_prefetch_distance"), 1),
                   num(x.get("backward_prefetch_distance"), 1)] for x in layers[:LAYER_ROWS]]
    return table


def pipeline_table(pipe: dict[str, Any]) -> Table | None:
    stages = pipe.get("stages") or []
    if not stages:
        return None
    cols = [Column("stage"), Column("rank"), Column("compute ms", title="per step (median)"),
            Column("step ms"), Column("waiting ms", title="send/recv with no compute running"),
            Column("warm-up", title="waiting until the first forward micro-batch ends"),
            Column("steady", title="waiting between warm-up and cool-down"),
            Column("cool-down", title="waiting from the start of the last backward micro-batch"),
            Column("idle", title="share of the step the stage does not compute")]
    caption = (f"{pipe.get('micro_batches') or '?'} micro-batches "
               f"({pipe.get('schedule') or 'schedule unknown'}); ideal bubble "
               f"{_pct(pipe.get('ideal_bubble_pct'))}; balanced stages save "
               f"{pipe.get('imbalance_saving_ms', 0.0):.1f} ms per step")
    table = Table(cols, caption=caption)
    table.rows = [[num(s["stage"], 0), num(s["rank"], 0), num(s["compute_ms"], 1),
                   num(s["step_ms"], 1), num(s["waiting_ms"], 1), num(s["warmup_wait_ms"], 1),
                   num(s["steady_wait_ms"], 1), num(s["cooldown_wait_ms"], 1),
                   num(s["idle_pct"], 1, "%")]
                  for s in stages]
    return table


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"
