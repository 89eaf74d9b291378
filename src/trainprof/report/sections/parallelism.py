"""The parallelism section's renderers (docs/parallelism.md): the kinds of parallelism a rank
shows with the evidence for each, its FSDP layers and its tensor-parallel layers. HTML cells are
escaped by the template; every trace string in the Markdown goes through md_text."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table as RichTable
from rich.text import Text

from trainprof.analysis.parallelism.result import Parallelism
from trainprof.formatting import number
from trainprof.report.html.tables import Column, Table, num
from trainprof.report.html.tables import text as text_cell
from trainprof.report.markdown.text import md_text, table
from trainprof.report.quantities import add_name_column, add_number_columns, compact_table, pct
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: Layers listed in the text report and the Markdown comment: FSDP layers the most exposed
#: first, tensor-parallel layers the most time on the critical path first.
LAYER_ROWS = 8
#: Layers listed on the HTML page (the tables sort).
HTML_LAYER_ROWS = 16
_NAMES = {"fsdp": "FSDP", "pipeline": "pipeline", "tensor": "tensor parallel",
          "expert": "expert parallel", "ddp": "DDP"}


def text(result: Parallelism, ctx: ViewContext) -> Group | None:
    """The kinds with their evidence, the FSDP and tensor-parallel layers and the rank's
    all-to-all, or None when the rank shows no parallelism."""
    if not result.kinds:
        return None
    lines = [Text("Parallelism: " + " + ".join(_NAMES[k] for k in result.kinds), style="bold")]
    lines += [Text(f"  {_NAMES[k]}: {result.evidence[k]}") for k in result.kinds]
    if result.process_groups:
        groups = "; ".join(f"{g.name} ({g.description}, {g.size} ranks)"
                           for g in result.process_groups)
        lines.append(Text(f"  process groups: {groups}", style="dim"))
    parts: list[Text | RichTable] = [*lines]
    if result.layers:
        parts.append(_fsdp_layers_text(result))
    if (tp := _tensor_layers_text(result)) is not None:
        parts.append(tp)
    if result.expert is not None:
        e = result.expert
        parts.append(Text(f"  all-to-all {e.all_to_all_ms:.2f} ms/step, "
                          f"{e.exposed_ms:.2f} exposed ({e.hidden_pct:.0f}% beside compute)"))
    return Group(*parts)


def _fsdp_layers_text(result: Parallelism) -> RichTable:
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


def _tensor_layers_text(result: Parallelism) -> RichTable | None:
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


def html(result: Parallelism | None, ctx: ViewContext) -> list[HtmlBlock]:
    """The kinds, the FSDP layers and the tensor-parallel layers, each table where it has rows."""
    kinds = _kinds_table(result)
    tables = [t for t in (kinds, _fsdp_layers_table(result), _tensor_layers_table(result)) if t]
    return [HtmlBlock("Parallelism" if kinds else None, list(tables))] if tables else []


def _kinds_table(p: Parallelism | None) -> Table | None:
    """The kinds of parallelism a rank shows, with the evidence for each."""
    if p is None or not p.kinds:
        return None
    table = Table([Column("parallelism", numeric=False), Column("seen as", numeric=False)],
                  sortable=False)
    table.rows = [[text_cell(k), text_cell(p.evidence.get(k, ""))] for k in p.kinds]
    table.rows += [[text_cell("process group"),
                    text_cell(f"{g.name} ({g.description}, {g.size} ranks)")]
                   for g in p.process_groups]
    return table


def _fsdp_layers_table(p: Parallelism | None) -> Table | None:
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
    table.rows = [[text_cell(x.label), num(x.forward_gather_ms, 2),
                   num(x.backward_gather_ms, 2), num(x.reduce_scatter_ms, 2),
                   num(x.gathers_per_step, 0), num(x.forward_prefetch_distance, 1),
                   num(x.backward_prefetch_distance, 1)] for x in layers[:HTML_LAYER_ROWS]]
    return table


def _tensor_layers_table(p: Parallelism | None) -> Table | None:
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
    table.rows = [[text_cell(x.layer), num(x.calls_per_step, 0), num(x.comm_ms, 2),
                   num(x.exposed_ms, 2), num(x.on_path_ms, 2)]
                  for x in tp.layers[:HTML_LAYER_ROWS]]
    return table


def markdown(result: Parallelism | None, ctx: ViewContext) -> str:
    """The kinds and the FSDP layers, then the tensor-parallel layers, or "" when the rank shows
    none of them."""
    return "\n\n".join(x for x in (_kinds_and_fsdp_md(result), _tensor_layers_md(result)) if x)


def _kinds_and_fsdp_md(rank: Parallelism | None) -> str:
    if rank is None:
        return ""
    out = []
    if rank.kinds:
        out += [f"- {md_text(k)}: {md_text(rank.evidence.get(k, ''), None)}" for k in rank.kinds]
        out += [f"- process group {md_text(g.name)} ({md_text(g.description)}, {g.size} ranks)"
                for g in rank.process_groups]
        out.append("")
    layers = sorted(rank.layers, key=lambda x: x.exposed_ms, reverse=True)
    if layers:
        rows = [[md_text(x.label), number(x.forward_gather_ms, 2),
                 number(x.backward_gather_ms, 2), number(x.reduce_scatter_ms, 2),
                 number(x.forward_prefetch_distance, 1), number(x.backward_prefetch_distance, 1)]
                for x in layers[:LAYER_ROWS]]
        out += ["FSDP layers: communication with no compute running (ms per step), and how "
                "many layers ahead each all-gather is issued (prefetch distance)", "",
                table(["layer", "all-gather forward", "all-gather backward", "reduce-scatter",
                       "prefetch forward", "prefetch backward"], rows, "lrrrrr"), ""]
    return "\n".join(out).rstrip()


def _tensor_layers_md(rank: Parallelism | None) -> str:
    tp = rank.tensor if rank is not None else None
    if tp is None or not tp.layers:
        return ""
    layers = sorted(tp.layers, key=lambda x: -x.on_path_ms)[:LAYER_ROWS]
    rows = [[md_text(x.layer), number(x.calls_per_step, 0), number(x.comm_ms, 2),
             number(x.exposed_ms, 2), number(x.on_path_ms, 2)] for x in layers]
    out = [f"Tensor-parallel collectives by layer: {number(tp.on_path_pct, 1, '%')} "
           "of the critical path", "",
           table(["layer", "calls/step", "ms/step", "exposed ms/step", "on path ms/step"],
                 rows, "lrrrr"), ""]
    return "\n".join(out).rstrip()


VIEW = SectionView("parallelism", text=text, html=html, markdown=markdown,
                   markdown_heading="Parallelism")
