"""Old names that still work for a while, with a ``DeprecationWarning`` naming the new one."""

from __future__ import annotations

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
