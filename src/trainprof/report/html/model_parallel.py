"""The HTML report's tensor- and expert-parallel tables (docs/parallelism.md): a rank's
tensor-parallel layers and the job's all-to-all across its expert ranks, from their records;
cells are escaped by the template."""

from __future__ import annotations

from trainprof.analysis.parallelism.expert import ExpertBalance
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.report.html.tables import Column, Table, num, text

#: Tensor-parallel layers listed (the table sorts).
LAYER_ROWS = 16


def tensor_layers_table(p: Parallelism | None) -> Table | None:
    tp = p.tensor if p is not None else None
    if tp is None or not tp.layers:
        return None
    cols = [Column("layer", numeric=False), Column("calls/step"), Column("ms/step"),
            Column("exposed ms/step", title="with no compute running beside"),
            Column("on path ms/step", title="on the step's critical path")]
    share = tp.on_path_pct
    caption = ("Tensor-parallel collectives by layer: "
               + ("unknown" if share is None else f"{share:.1f}%") + " of the critical path")
    table = Table(cols, caption=caption)
    table.rows = [[text(x.layer), num(x.calls_per_step, 0), num(x.comm_ms, 2),
                   num(x.exposed_ms, 2), num(x.on_path_ms, 2)] for x in tp.layers[:LAYER_ROWS]]
    return table


def experts_table(experts: ExpertBalance | None) -> Table | None:
    if experts is None or not experts.ranks:
        return None
    cols = [Column("rank"), Column("all-to-all ms/step"),
            Column("exposed ms/step", title="with no compute running beside"),
            Column("hidden", title="share of the all-to-all beside compute"), Column("step ms")]
    caption = (f"The slowest rank waits {experts.imbalance_ms:.1f} ms per step over the mean "
               f"({experts.imbalance_pct:.1f}% of the step). " + " ".join(experts.notes))
    table = Table(cols, caption=caption.strip())
    table.rows = [[num(r.rank, 0), num(r.all_to_all_ms, 2), num(r.exposed_ms, 2),
                   num(r.hidden_pct, 1, "%"), num(r.step_ms, 1)] for r in experts.ranks]
    return table
