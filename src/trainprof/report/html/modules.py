"""The module tree in the HTML report: nested ``<details>``, one per module with submodules.

Reads the ``modules`` record; names stay plain ``str`` (the template escapes).
"""

from __future__ import annotations

import msgspec
from msgspec import field

from trainprof.analysis.sections.modules import ModuleTree
from trainprof.formatting import counted
from trainprof.report.terminal.modules import columns

#: Levels of the tree open when the page loads (deeper ones open on a click).
OPEN_LEVELS = 2


class ModuleNode(msgspec.Struct):
    name: str
    path: str
    figures: str
    share_pct: float
    open: bool
    children: list[ModuleNode] = field(default_factory=list)


class ModulesView(msgspec.Struct):
    caption: str
    roots: list[ModuleNode]
    note: str | None


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
