"""The module tree's shape on the HTML page: nested ``<details>``, one per module with
submodules, drawn by the template's ``module_tree`` macro (templates/modules.html.j2) from the
``ModulesView`` that report/sections/modules.py builds. Names stay plain ``str`` (the template
escapes).
"""

from __future__ import annotations

import msgspec
from msgspec import field


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
