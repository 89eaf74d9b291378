"""Old names that still work for a while, with a ``DeprecationWarning`` naming the new one."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def old_names(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each old name of ``names`` with the object the value
    names: ``"NewName"`` in the same module, or ``"package.module:NewName"`` elsewhere; it
    warns at each use."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, new = names[name].rpartition(":")
        where = where or module
        warnings.warn(f"{module}.{name} is now {where}.{new}; the old name will go.",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(where), new)

    return __getattr__
