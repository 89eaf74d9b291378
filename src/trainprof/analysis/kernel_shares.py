"""Kernel time per class (communication, Tensor Core, other compute) and the unclassified names.

The classes come from trace/kernel_class.py; see docs/kernel_classes.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis.tabular import share
from trainprof.trace.kernel_class import CLASS_LABELS
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.model import Trace

#: How many unclassified kernel names the summary lists (largest time first).
UNCLASSIFIED_LISTED = 10


@dataclass
class UnclassifiedKernel:
    """A kernel name of no known family: counted as compute, a guess the reader should see."""

    name: str
    calls: int
    total_us: float


@dataclass
class KernelClassShares:
    """Kernel time (µs, whole trace) per class, their shares of all kernel time, and the guesses."""

    total_us: float
    class_us: dict[str, float]
    class_pct: dict[str, float | None]
    by_launch_us: float  # communication decided by the launching op or frame, not the name
    unclassified_us: float
    unclassified_pct: float | None
    unclassified: list[UnclassifiedKernel] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kernel_class_shares(trace: Trace, kernels: np.ndarray) -> KernelClassShares:
    """Per class, the time of the kernels (event indices) given."""
    ev = trace.events
    classes = kernel_classes(trace)
    dur = ev.dur[kernels]
    cls = classes.cls[kernels]
    total = float(dur.sum())
    per = np.bincount(cls, weights=dur, minlength=len(CLASS_LABELS))
    guessed = classes.unclassified[kernels]
    names, inverse = np.unique(ev.name[kernels[guessed]], return_inverse=True)
    time = np.bincount(inverse, weights=dur[guessed], minlength=len(names))
    calls = np.bincount(inverse, minlength=len(names))
    order = np.argsort(-time, kind="stable")[:UNCLASSIFIED_LISTED]
    return KernelClassShares(
        total_us=total,
        class_us={label: float(per[i]) for i, label in enumerate(CLASS_LABELS)},
        class_pct={label: share(float(per[i]), total) for i, label in enumerate(CLASS_LABELS)},
        by_launch_us=float(dur[classes.by_launch[kernels]].sum()),
        unclassified_us=float(time.sum()),
        unclassified_pct=share(float(time.sum()), total),
        unclassified=[UnclassifiedKernel(ev.names[names[i]], int(calls[i]), float(time[i]))
                      for i in order.tolist()],
    )
