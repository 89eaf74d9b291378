"""Names from the bench package, which needs torch: imported only when a command runs."""

from __future__ import annotations

import importlib
from typing import Any

from trainprof.errors import TrainprofError


def bench_api(module: str, name: str) -> Any:
    """``module.name``, or one sentence saying that the command needs PyTorch."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise TrainprofError(f"this command needs PyTorch ({exc}).") from exc
