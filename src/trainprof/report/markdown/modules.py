"""The module tree as a Markdown table (``analyze --modules --format md``)."""

from __future__ import annotations

from trainprof.analysis.sections.modules import ModuleTree
from trainprof.formatting import counted
from trainprof.report.markdown.text import md_text, table
from trainprof.report.terminal.modules import MIN_SHARE_PCT, columns, shown_rows

#: Marks a level of nesting in the module column (Markdown tables drop leading spaces).
INDENT = "· "


def modules_md(tree: ModuleTree) -> str:
    """The tree of a ``modules`` result; the way to record it when absent."""
    if not tree.available:
        return md_text(tree.note or "", None)
    kept, hidden = shown_rows(tree)
    cols = columns(tree)
    head = ["module", "calls", *(f"{h} ms" for h, _ in cols), "share"]
    rows = [[INDENT * r.depth + md_text(r.name), str(r.calls),
             *(f"{time(r) / 1000:,.2f}" for _, time in cols), f"{r.share_pct:.1f}%"]
            for r in kept]
    clock = "kernel time" if tree.clock == "device" else "host time"
    out = [f"By {clock}, over {counted(tree.steps, 'step')}; fwd and bwd include "
           "submodules.", "", table(head, rows)]
    if hidden:
        out += ["", f"{hidden} smaller modules (under {MIN_SHARE_PCT:g}% of the step each) "
                "are in the JSON result."]
    if tree.note:
        out += ["", md_text(tree.note, None)]
    return "\n".join(out)
