"""Importing a tracker's package, with one sentence when it is not installed."""

from __future__ import annotations

import importlib
from typing import Any

from trainprof.errors import TrainprofError


def require(module: str, extra: str) -> Any:
    """``import module``, or a ``TrainprofError`` that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrainprofError(f"logging to {extra} needs the {module.split('.')[0]} package: "
                             f"install it with pip install 'trainprof[{extra}]'.") from None
