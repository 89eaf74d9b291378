"""How result objects show in Jupyter: ``_repr_html_`` and a short ``__repr__`` (docs/notebook.md).

The result types live in the analysis, diagnose and history layers, which never import the
report layer. The package (``trainprof/__init__.py``, above every layer) hands this module the
notebook renderer with ``use_notebook_renderer``; it is imported when a notebook first shows a
result.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

#: A renderer: the object -> its HTML, or its one-line ``repr``.
Renderer = Callable[[Any], str]
#: Imports and returns the (HTML, repr) renderers.
RendererLoader = Callable[[], tuple[Renderer, Renderer]]

_loaders: list[RendererLoader] = []


def use_notebook_renderer(load: RendererLoader) -> None:
    """Show results through the renderers ``load()`` returns (called once, when first needed)."""
    _loaders[:] = [load]
    _renderers.cache_clear()


@cache
def _renderers() -> tuple[Renderer, Renderer]:
    if not _loaders:
        raise RuntimeError("no notebook renderer: import trainprof")
    return _loaders[0]()


class NotebookDisplay:
    """Mixin: the object's HTML in a notebook, and a one-line ``repr``."""

    def _repr_html_(self) -> str:
        return _renderers()[0](self)

    def __repr__(self) -> str:
        return _renderers()[1](self)
