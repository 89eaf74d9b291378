"""What in a trace shows a kind of parallelism: the names each one leaves, recognised once.

* FSDP: the ``FSDP::`` ranges of FSDP2 (``FSDP::pre_forward (layers.0)``, ``FSDP::all_gather
  (layers.0)``...) and the ``FullyShardedDataParallel.*`` ranges of FSDP1;
* pipeline: the micro-batch ranges of ``torch.distributed.pipelining``'s schedules
  (``Forward 3``/``Backward 3`` from the single-stage schedules, ``PP:1F3``/``PP:1B3``/
  ``PP:1I3``/``PP:1W3`` from the multi-stage ones) and point-to-point ``send``/``recv``;
* DDP: its ``DistributedDataParallel.forward`` range, or all-reduces issued in backward;
* tensor parallelism: DTensor's functional collectives (``_c10d_functional::all_reduce``...);
* expert parallelism: all-to-all (and DeepEP dispatch/combine kernels).
"""

from __future__ import annotations

from enum import IntEnum

from trainprof.lazy import LazyPattern
from trainprof.trace.model import collective_type


class Signal(IntEnum):
    """What one event name says about the parallelism (NONE: nothing)."""

    NONE = 0
    FSDP_RANGE = 1
    FORWARD_MICRO_BATCH = 2
    BACKWARD_MICRO_BATCH = 3
    DDP_RANGE = 4


_FSDP = LazyPattern(r"^FSDP::|^FullyShardedDataParallel\.")
#: ``Forward 3`` (single-stage schedules) or ``PP:1F3`` (stage 1, micro-batch 3).
_FORWARD = LazyPattern(r"^Forward (\d+)$|^PP:(\d+)F(\d+)$")
_BACKWARD = LazyPattern(r"^Backward (\d+)$|^PP:(\d+)[BIW](\d+)$")
_DDP = LazyPattern(r"^DistributedDataParallel\.forward$")
#: An FSDP2 hook range and the module it is for: ``FSDP::pre_forward (layers.0)``.
FSDP_HOOK = LazyPattern(r"^FSDP::(\w+) \((.*)\)$")
#: DTensor's functional collectives (tensor parallelism, or compiled FSDP).
_FUNCTIONAL = LazyPattern(r"^_?c10d_functional::")
#: The c10d dispatch ops: one per collective call (the backend ranges and kernels repeat it).
_C10D_CALL = LazyPattern(r"^c10d::|^_?c10d_functional::")

#: Collective types that tell the parallelism apart.
P2P_TYPES = ("send", "recv", "send_recv")
TYPES = ("send", "recv", "send_recv", "all_gather", "reduce_scatter", "all_reduce",
         "all_to_all")


def name_signal(name: str) -> Signal:
    """The signal of one (non-communication) event name."""
    if _FSDP.match(name):
        return Signal.FSDP_RANGE
    if _FORWARD.match(name):
        return Signal.FORWARD_MICRO_BATCH
    if _BACKWARD.match(name):
        return Signal.BACKWARD_MICRO_BATCH
    if _DDP.match(name):
        return Signal.DDP_RANGE
    return Signal.NONE


def pipeline_stage(name: str) -> int | None:
    """The stage a multi-stage schedule's micro-batch range names (``PP:1F3`` -> 1)."""
    m = _FORWARD.match(name) or _BACKWARD.match(name)
    return int(m.group(2)) if m and m.group(2) is not None else None


#: The type codes: an index into TYPE_NAMES.
TYPE_NAMES = (*TYPES, "other")
P2P_CODES = tuple(TYPE_NAMES.index(t) for t in P2P_TYPES)
ALL_REDUCE = TYPE_NAMES.index("all_reduce")
ALL_GATHER = TYPE_NAMES.index("all_gather")
#: FSDP's gradient reductions: reduce-scatters, and the all-reduces gloo runs them as (and
#: HSDP's all-reduce across replicas).
REDUCTIONS = (TYPE_NAMES.index("reduce_scatter"), ALL_REDUCE)
ALL_TO_ALL = TYPE_NAMES.index("all_to_all")


def type_code(name: str) -> int:
    """The collective type of a communication event, as its index in TYPE_NAMES."""
    kind = collective_type(name)
    return TYPE_NAMES.index(kind if kind in TYPES else "other")


def is_functional(name: str) -> bool:
    return bool(_FUNCTIONAL.match(name))


def is_c10d_call(name: str) -> bool:
    return bool(_C10D_CALL.match(name))
