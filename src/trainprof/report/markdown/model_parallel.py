"""Markdown of tensor and expert parallelism (docs/parallelism.md): a rank's tensor-parallel
layers and the job's all-to-all across its expert ranks, from their records; every trace
string goes through md_text."""

from __future__ import annotations

from trainprof.analysis.parallelism.expert import ExpertBalance
from trainprof.analysis.parallelism.result import Parallelism
from trainprof.formatting import number
from trainprof.report.markdown.text import md_text, table

#: Tensor-parallel layers listed, the most time on the critical path first.
LAYER_ROWS = 8


def model_parallel_md(rank: Parallelism | None, experts: ExpertBalance | None) -> str:
    """The tensor-parallel layers and the experts' all-to-all, or "" when neither is shown."""
    out = []
    tp = rank.tensor if rank is not None else None
    if tp is not None and tp.layers:
        layers = sorted(tp.layers, key=lambda x: -x.on_path_ms)[:LAYER_ROWS]
        rows = [[md_text(x.layer), number(x.calls_per_step, 0), number(x.comm_ms, 2),
                 number(x.exposed_ms, 2), number(x.on_path_ms, 2)] for x in layers]
        out += [f"Tensor-parallel collectives by layer: {number(tp.on_path_pct, 1, '%')} "
                "of the critical path", "",
                table(["layer", "calls/step", "ms/step", "exposed ms/step", "on path ms/step"],
                      rows, "lrrrr"), ""]
    if experts is not None and experts.ranks:
        out += [f"Expert parallelism: all-to-all {number(experts.hidden_pct, 1, '%')} beside "
                f"compute; the slowest rank waits {number(experts.imbalance_ms, 1)} "
                f"ms per step over the mean ({number(experts.imbalance_pct, 1, '%')} of the "
                "step)", ""]
        rows = [[str(r.rank), number(r.all_to_all_ms, 2), number(r.exposed_ms, 2),
                 number(r.hidden_pct, 1, "%")] for r in experts.ranks]
        out += [table(["rank", "all-to-all ms/step", "exposed ms/step", "hidden"], rows,
                      "rrrr"), ""]
        out += [f"> {md_text(n, None)}" for n in experts.notes]
    return "\n".join(out).rstrip()
