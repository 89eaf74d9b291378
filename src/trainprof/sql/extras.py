"""The optional packages behind export and SQL, with one sentence when one is missing."""

from __future__ import annotations

import importlib
from typing import Any

from trainprof.errors import TrainprofError


def require(module: str, what: str) -> Any:
    """``import module``, or a ``TrainprofError`` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainprofError(f"{what} needs {module.split('.')[0]}: install it with "
                             "pip install 'trainprof[sql]'.") from None
