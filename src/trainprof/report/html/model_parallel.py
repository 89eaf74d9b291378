"""The HTML report's tensor- and expert-parallel tables (docs/parallelism.md): a rank's
tensor-parallel layers and the job's all-to-all across its expert ranks. Reads the JSON form;
cells are escaped by the template."""

from __future__ import annotations

from typing import Any

from trainprof.report.html.tables import Column, Table, num, text

#: Tensor-parallel layers listed (the table sorts).
LAYER_ROWS = 16


def tensor_layers_table(p: dict[str, Any]) -> Table | None:
    tp = p.get("tensor") or {}
    layers = tp.get("layers") or []
    if not layers:
        return None
    cols = [Column("layer", numeric=False), Column("calls/step"), Column("ms/step"),
            Column("exposed ms/step", title="with no compute running beside"),
            Column("on path ms/step", title="on the step's critical path")]
    share = tp.get("on_path_pct")
    caption = ("Tensor-parallel collectives by layer: "
               + ("unknown" if share is None else f"{share:.1f}%") + " of the critical path")
    table = Table(cols, caption=caption)
    table.rows = [[text(x["layer"]), num(x["calls_per_step"], 0), num(x["comm_ms_per_step"], 2),
                   num(x["exposed_ms_per_step"], 2), num(x["on_path_ms_per_step"], 2)]
                  for x in layers[:LAYER_ROWS]]
    return table


def experts_table(experts: dict[str, Any]) -> Table | None:
    ranks = experts.get("ranks") or []
    if not ranks:
        return None
    cols = [Column("rank"), Column("all-to-all ms/step"),
            Column("exposed ms/step", title="with no compute running beside"),
            Column("hidden", title="share of the all-to-all beside compute"), Column("step ms")]
    caption = (f"The slowest rank waits {experts.get('imbalance_ms_per_step', 0.0):.1f} ms per "
               f"step over the mean ({experts.get('imbalance_pct', 0.0):.1f}% of the step). "
               + " ".join(experts.get("notes") or []))
    table = Table(cols, caption=caption.strip())
    table.rows = [[num(r["rank"], 0), num(r["all_to_all_ms_per_step"], 2),
                   num(r["exposed_ms_per_step"], 2), num(r["hidden_pct"], 1, "%"),
                   num(r["step_ms"], 1)] for r in ranks]
    return table
