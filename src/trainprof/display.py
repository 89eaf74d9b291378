"""How result objects show in Jupyter: ``_repr_html_`` and a short ``__repr__`` (docs/notebook.md).

The result types live in the analysis, diagnose and history layers, which never import the
report layer; their display methods name the renderer here, by module and function, and it is
imported only when a notebook first shows one.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The renderer of each result type: "module:function", the function taking the object.
_HTML = "trainprof.report.html.notebook:html_of"
_SHORT = "trainprof.report.html.notebook:short_of"


def _call(where: str, obj: Any) -> Any:
    module, function = where.split(":")
    return getattr(importlib.import_module(module), function)(obj)


class NotebookDisplay:
    """Mixin: the object's HTML in a notebook, and a one-line ``repr``."""

    def _repr_html_(self) -> str:
        return _call(_HTML, self)

    def __repr__(self) -> str:
        return _call(_SHORT, self)
