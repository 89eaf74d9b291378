"""Old names that still work for a while, with a ``DeprecationWarning`` naming the new one."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any


def renamed(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each old name of ``names`` with the object of its
    new name in the same module, warning once per use."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new = names[name]
        warnings.warn(f"{module}.{name} is now {module}.{new}; the old name will go.",
                      DeprecationWarning, stacklevel=2)
        return getattr(sys.modules[module], new)

    return __getattr__


def moved(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each name of ``names`` with the object of that name
    in the module it moved to (``names[name]``), warning once per use."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {names[name]}.{name}; the old place will go.",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(names[name]), name)

    return __getattr__
