"""Which process this is, for file names and the `ranks=` filter.

Read late and in order of trust: a given Accelerator, an initialised torch.distributed process
group, then the launcher's environment (torchrun and accelerate set RANK; some set only
LOCAL_RANK), else rank 0.
"""

from __future__ import annotations

import os
from typing import Any


def current_rank(accelerator: Any = None) -> int:
    """The global rank of this process (0 when not distributed)."""
    if accelerator is not None:
        return int(accelerator.process_index)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:  # a broken process group must not stop us naming a file
        pass
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def world_size(accelerator: Any = None) -> int:
    """How many processes take part (1 when not distributed)."""
    if accelerator is not None:
        return int(accelerator.num_processes)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size()
    except Exception:
        pass
    value = os.environ.get("WORLD_SIZE", "")
    return int(value) if value.isdigit() else 1
