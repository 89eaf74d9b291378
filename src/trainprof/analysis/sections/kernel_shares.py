"""Kernel time per class (communication, Tensor Core, other compute) and the unclassified names.

The classes come from trace/kernel_class.py; see docs/kernel_classes.md.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis.tabular import share
from trainprof.structs import Record
from trainprof.trace.kernel_class import CLASS_LABELS
from trainprof.trace.kernel_context import kernel_classes
from trainprof.trace.model import Trace

#: How many unclassified kernel names the summary lists (largest time first).
UNCLASSIFIED_LISTED = 10


class UnclassifiedKernel(Record):
    """A kernel name of no known family: counted as compute, a guess the reader should see."""

    name: str
    calls: int
    total_us: float


class KernelClassShares(Record):
    """Kernel time (µs, whole trace) per class, their shares of all kernel time, and the guesses."""

    total_us: float
    class_us: dict[str, float]
    class_pct: dict[str, float | None]
    by_launch_us: float  # communication decided by the launching op or frame, not the name
    unclassified_us: float
    unclassified_pct: float | None
    unclassified: list[UnclassifiedKernel] = field(default_factory=list)


class ClassPart(msgspec.Struct):
    """Kernel time per class of some kernels, and the unclassified names (index, calls, time):
    what one window adds to the shares."""

    total_us: float
    class_us: np.ndarray  # per class, in CLASS_LABELS order
    by_launch_us: float
    guessed: np.ndarray  # name indices of the unclassified kernels, ascending
    guessed_calls: np.ndarray
    guessed_us: np.ndarray


def class_part(trace: Trace, kernels: np.ndarray) -> ClassPart:
    """Per class, the time of the kernels (event indices) given."""
    ev = trace.events
    classes = kernel_classes(trace)
    dur = ev.dur[kernels]
    guessed = classes.unclassified[kernels]
    names, inverse = np.unique(ev.name[kernels[guessed]], return_inverse=True)
    return ClassPart(
        total_us=float(dur.sum()),
        class_us=np.bincount(classes.cls[kernels], weights=dur, minlength=len(CLASS_LABELS)),
        by_launch_us=float(dur[classes.by_launch[kernels]].sum()),
        guessed=names,
        guessed_calls=np.bincount(inverse, minlength=len(names)),
        guessed_us=np.bincount(inverse, weights=dur[guessed], minlength=len(names)),
    )


def combine_class_parts(parts: list[ClassPart], names: list[str]) -> KernelClassShares:
    """The shares of the kernels of every part (``names``: the trace's name table)."""
    total = sum(p.total_us for p in parts)
    per = np.sum([p.class_us for p in parts], axis=0)
    guessed, inverse = np.unique(np.concatenate([p.guessed for p in parts]).astype(np.int64),
                                 return_inverse=True)
    time = np.bincount(inverse, weights=np.concatenate([p.guessed_us for p in parts]),
                       minlength=len(guessed))
    calls = np.bincount(inverse, weights=np.concatenate([p.guessed_calls for p in parts]),
                        minlength=len(guessed))
    order = np.argsort(-time, kind="stable")[:UNCLASSIFIED_LISTED]
    return KernelClassShares(
        total_us=total,
        class_us={label: float(per[i]) for i, label in enumerate(CLASS_LABELS)},
        class_pct={label: share(float(per[i]), total) for i, label in enumerate(CLASS_LABELS)},
        by_launch_us=sum(p.by_launch_us for p in parts),
        unclassified_us=float(time.sum()),
        unclassified_pct=share(float(time.sum()), total),
        unclassified=[UnclassifiedKernel(names[guessed[i]], int(calls[i]), float(time[i]))
                      for i in order.tolist()],
    )


def kernel_class_shares(trace: Trace, kernels: np.ndarray) -> KernelClassShares:
    """Per class, the time of the kernels (event indices) given."""
    return combine_class_parts([class_part(trace, kernels)], trace.events.names)
