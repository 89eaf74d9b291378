"""Terminal views of tensor and expert parallelism (docs/parallelism.md): a rank's
tensor-parallel layers, and the job's all-to-all across its expert ranks."""

from __future__ import annotations

from rich.table import Table

from trainprof.analysis.parallelism.expert import ExpertBalance
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.report.quantities import add_name_column, add_number_columns, compact_table, pct

#: Tensor-parallel layers shown, the most time on the critical path first.
LAYER_ROWS = 8


def tensor_layers(result: Parallelism) -> Table | None:
    tp = result.tensor
    if tp is None or not tp.layers:
        return None
    t = compact_table("Tensor-parallel collectives by layer: "
                      f"{pct(tp.on_path_pct) if tp.on_path_pct is not None else 'unknown'} of "
                      "the critical path")
    add_name_column(t, "layer", 32)
    add_number_columns(t, "calls/step", "ms/step", "exposed ms/step", "on path ms/step")
    for x in sorted(tp.layers, key=lambda x: -x.on_path_ms)[:LAYER_ROWS]:
        t.add_row(x.layer, f"{x.calls_per_step:.0f}", f"{x.comm_ms:.2f}",
                  f"{x.exposed_ms:.2f}", f"{x.on_path_ms:.2f}")
    return t


def render_experts(result: ExpertBalance) -> Table | None:
    if not result.ranks:
        return None
    slow, heavy = result.slowest, result.overloaded
    title = f"Expert parallelism: all-to-all, {pct(result.hidden_pct)} beside compute"
    if slow is not None and heavy is not None:
        title += (f"; rank {slow.rank} waits {result.imbalance_ms:.1f} ms/step over the mean "
                  f"({pct(result.imbalance_pct)} of the step), rank {heavy.rank} overloaded")
    t = compact_table(title)
    if result.notes:
        t.caption, t.caption_justify = " ".join(result.notes), "left"
    t.add_column("rank")
    add_number_columns(t, "all-to-all ms/step", "exposed ms/step", "hidden", "step ms")
    for r in result.ranks:
        t.add_row(str(r.rank), f"{r.all_to_all_ms:.2f}", f"{r.exposed_ms:.2f}",
                  pct(r.hidden_pct), f"{r.step_ms:.1f}")
    return t
