"""The modules section's renderers: time per nn.Module, as a tree (docs/modules.md). The text
and Markdown trees (``analyze --modules``) leave out the smallest modules; the HTML page has
every module as nested ``<details>`` (report/html/modules.py). Names stay plain ``str`` for the
template, which escapes them; the Markdown puts them through md_text."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group, RenderableType
from rich.text import Text

from trainprof.analysis.sections.modules import ModuleRow, ModuleTree
from trainprof.formatting import counted
from trainprof.report.html.modules import ModuleNode, ModulesView
from trainprof.report.markdown.text import md_text, table
from trainprof.report.quantities import (
    ByWidth,
    add_name_column,
    add_number_columns,
    compact_table,
    name_cell,
    pct,
)
from trainprof.report.sections.view import HtmlBlock, SectionView, ViewContext

#: Modules under this share of all step time are left out of the text and Markdown trees.
MIN_SHARE_PCT = 1.0
#: The widest the module column gets.
MODULE_WIDTH = 60
#: Below this terminal width only the forward and backward totals are shown.
ALL_COLUMNS_FROM = 120
#: Levels of the HTML tree open when the page loads (deeper ones open on a click).
OPEN_LEVELS = 2
#: Marks a level of nesting in the Markdown module column (Markdown tables drop leading spaces).
INDENT = "· "


def shown_rows(tree: ModuleTree) -> tuple[list[ModuleRow], int]:
    """The rows of a ``modules`` result at or above ``MIN_SHARE_PCT``, in tree order, and how
    many were left out (a child never outweighs its parent, so whole subtrees go)."""
    kept = [r for r in tree.rows if r.share_pct >= MIN_SHARE_PCT]
    return kept, len(tree.rows) - len(kept)


#: A time column: its header and the row's time (µs) it shows.
Column = tuple[str, Callable[[ModuleRow], float]]


def columns(tree: ModuleTree) -> list[Column]:
    """The time columns: device time on GPU traces, host time otherwise."""
    if tree.clock == "device":
        return [("dev self", lambda r: r.device_self_us),
                ("dev fwd", lambda r: r.device_total_us),
                ("dev bwd", lambda r: r.backward_device_total_us),
                ("host fwd", lambda r: r.host_total_us)]
    return [("self", lambda r: r.host_self_us), ("fwd", lambda r: r.host_total_us),
            ("bwd", lambda r: r.backward_host_total_us)]


def text(result: ModuleTree, ctx: ViewContext) -> Text | ByWidth | None:
    """The tree, when ``ctx.modules`` (``--modules``, ``AnalyzeOptions.modules``) asks for it;
    the way to record it when the trace has none."""
    if not ctx.modules:
        return None
    if not result.available:
        return Text(result.note or "", style="yellow")
    return ByWidth(lambda width: _tree(result, width))


def _tree(result: ModuleTree, width: int) -> Group:
    kept, hidden = shown_rows(result)
    cols = columns(result)
    left_out = []
    if width < ALL_COLUMNS_FROM:  # the names need the room more than the self time
        left_out = [h for h, _ in cols[:1] + cols[3:]]
        cols = cols[1:3]
    clock = "kernel time" if result.clock == "device" else "host time"
    head = Text(f"Modules by {clock} (ms over {counted(result.steps, 'step')}; fwd and bwd include "
                "submodules; share of all step time)", style="italic")
    t = compact_table()
    add_name_column(t, "module", MODULE_WIDTH)
    add_number_columns(t, "calls", *(h for h, _ in cols), "share")
    for r in kept:
        t.add_row(name_cell("  " * r.depth + r.name, MODULE_WIDTH), str(r.calls),
                  *(f"{time(r) / 1000:.2f}" for _, time in cols), pct(r.share_pct))
    parts: list[RenderableType] = [head, t]
    if left_out:  # said, never dropped silently
        parts.append(Text(f"Columns {' and '.join(left_out)} left out below {ALL_COLUMNS_FROM} "
                          "columns of terminal; all are in the JSON result", style="dim"))
    if hidden:
        parts.append(Text(f"{hidden} smaller modules (under {MIN_SHARE_PCT:g}% of the step "
                          "each) not shown; all are in the JSON result", style="dim"))
    if result.note:
        parts.append(Text(result.note, style="dim"))
    return Group(*parts)


def html(result: ModuleTree | None, ctx: ViewContext) -> list[HtmlBlock]:
    view = modules_view(result)
    return [HtmlBlock(modules=view)] if view is not None else []


def modules_view(tree: ModuleTree | None) -> ModulesView | None:
    """The view of a ``modules`` result, or None for a result without one (an older file)."""
    if tree is None:
        return None
    if not tree.available:
        return ModulesView("", [], tree.note or "")
    cols = columns(tree)
    nodes: list[ModuleNode] = []
    roots: list[ModuleNode] = []
    for r in tree.rows:
        times = " · ".join(f"{label} {time(r) / 1000:,.2f} ms" for label, time in cols)
        node = ModuleNode(name=r.name, path=r.path,
                          figures=f"{r.share_pct:.1f}% · {counted(r.calls, 'call')} · {times}",
                          share_pct=r.share_pct, open=r.depth < OPEN_LEVELS)
        nodes.append(node)
        parent = r.parent
        (nodes[parent].children if 0 <= parent < len(nodes) - 1 else roots).append(node)
    clock = "kernel time" if tree.clock == "device" else "host time"
    caption = (f"By {clock} over {counted(tree.steps, 'step')}: share of all step time "
               "(forward and backward with submodules), calls, then self, forward and backward "
               "times. Click a module to open it.")
    return ModulesView(caption, roots, tree.note)


def markdown(result: ModuleTree | None, ctx: ViewContext) -> str:
    """The tree (with ``ctx.modules``) as a Markdown table; the way to record it when absent."""
    if not ctx.modules or result is None:
        return ""
    if not result.available:
        return md_text(result.note or "", None)
    kept, hidden = shown_rows(result)
    cols = columns(result)
    head = ["module", "calls", *(f"{h} ms" for h, _ in cols), "share"]
    rows = [[INDENT * r.depth + md_text(r.name), str(r.calls),
             *(f"{time(r) / 1000:,.2f}" for _, time in cols), f"{r.share_pct:.1f}%"]
            for r in kept]
    clock = "kernel time" if result.clock == "device" else "host time"
    out = [f"By {clock}, over {counted(result.steps, 'step')}; fwd and bwd include "
           "submodules.", "", table(head, rows)]
    if hidden:
        out += ["", f"{hidden} smaller modules (under {MIN_SHARE_PCT:g}% of the step each) "
                "are in the JSON result."]
    if result.note:
        out += ["", md_text(result.note, None)]
    return "\n".join(out)


VIEW = SectionView("modules", text=text, html=html, markdown=markdown,
                   markdown_heading="Time per module")
