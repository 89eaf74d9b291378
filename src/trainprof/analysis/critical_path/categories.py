"""What each piece of the critical path is: the split's categories and the what-if items."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import IntEnum

import numpy as np

from trainprof.analysis.calls.cache import per_trace
from trainprof.lazy import LazyPattern
from trainprof.trace.model import (
    FLAG_COMM,
    FLAG_DATALOADER,
    LAUNCH_KINDS,
    Kind,
    Trace,
    collective_type,
    sync_call_kind,
)

#: Host ranges whose own time (outside their children) is recorded host work: ops, the user's
#: annotations (``record_function``, ``user_annotation``: the Python code between the ops inside
#: the range the user marked), Python frames and runtime calls. Never untraced time.
RECORDED_HOST_KINDS = frozenset({Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON,
                                 *LAUNCH_KINDS})


#: Host ranges whose own time may hide a wait for the device (a poll or a spin inside them).
WAITING_KINDS = frozenset({Kind.USER_ANNOTATION, Kind.PYTHON, Kind.STEP})
#: Runtime and driver calls that ask whether device work is done without blocking: a loop of
#: them is a wait for that work.
QUERY_CALLS = LazyPattern(r"^(?:cuda|hip)(?:Event|Stream)Query$|^cu(?:Event|Stream)Query$")


class Category(IntEnum):
    """Where a piece of the critical path's time goes (the keys of the split)."""

    HOST_COMPUTE = 0
    LAUNCH_OVERHEAD = 1
    GPU_COMPUTE = 2
    GPU_COMMUNICATION = 3
    COPIES = 4
    SYNC_WAIT = 5
    DATA_LOADING = 6
    UNTRACED_HOST = 7


# The bits of a host segment's owner code (``host_categories``): a recorded host range, a
# call that launched device work, a blocking sync call, a poll, a range that may hide a wait.
_RECORDED, _LAUNCH, _SYNC, _POLL, _WAITING = 1, 2, 4, 8, 16


def _category_of() -> np.ndarray:
    """The Category of a segment by its owner's code: a sync call waits, a launch call is
    launch overhead, other recorded ranges are host compute, the rest untraced."""
    out = np.full(32, Category.UNTRACED_HOST, dtype=np.uint8)
    for c in range(32):
        if c & _SYNC:
            out[c] = Category.SYNC_WAIT
        elif c & _LAUNCH:
            out[c] = Category.LAUNCH_OVERHEAD
        elif c & _RECORDED:
            out[c] = Category.HOST_COMPUTE
    return out


_CATEGORY_OF = _category_of()

#: The split's keys, in Category order (JSON and text use these).
CATEGORY_KEYS = tuple(c.name.lower() for c in Category)
#: Item kinds a what-if can scale.
ITEM_KINDS = ("op", "kernel", "collective", "copy", "data_loader", "launches")


class ItemTable:
    """Interns what-if items, (kind, name) pairs, to small integers."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self._ids: dict[tuple[str, str], int] = {}

    def ids(self, kind: str, codes: np.ndarray, label: Callable[[int], str]) -> np.ndarray:
        """Item ids for name ``codes``, each named ``label(code)``."""
        if not len(codes) or int(codes.min()) < 0 or int(codes.max()) > 4 * len(codes) + 1024:
            uniq, inverse = np.unique(codes, return_inverse=True)
            table = np.array([self.id(kind, label(c)) for c in uniq.tolist()], dtype=np.int64)
            return table[inverse.reshape(-1)]
        # Small non-negative codes (names): a lookup table, not a sort (same ids, same order).
        lookup = np.zeros(int(codes.max()) + 1, dtype=np.int64)
        lookup[codes] = 1
        uniq = np.flatnonzero(lookup)
        lookup[uniq] = [self.id(kind, label(c)) for c in uniq.tolist()]
        return lookup[codes]

    def id(self, kind: str, name: str) -> int:
        key = (kind, name)
        if key not in self._ids:
            self._ids[key] = len(self.items)
            self.items.append(key)
        return self._ids[key]


def host_categories(trace: Trace, owner: np.ndarray, in_loader: np.ndarray,
                    launches: np.ndarray, table: ItemTable
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(Category, item, waiting, polls) of host segments owned by ``owner`` events (-1: inside
    no range); ``in_loader``: the owner is the DataLoader's wait or inside it; ``launches``: the
    events that launched device work. Other runtime calls (cudaMalloc, cudaGetDevice...) count
    as host compute, named after the call. ``waiting``: the segment may hide a wait for the
    device (no range, WAITING_KINDS' own time, a poll); ``polls``: it is a poll (QUERY_CALLS),
    None where the trace has none."""
    ev = trace.events
    # One code per event (the last for none), one look-up per segment: the code's bits say
    # what the owner is, and small tables what that makes the segment.
    code = np.zeros(len(ev) + 1, dtype=np.uint8)
    by_kind = np.zeros(256, dtype=np.uint8)
    by_kind[list(RECORDED_HOST_KINDS)] = _RECORDED
    by_kind[list(WAITING_KINDS)] |= _WAITING
    code[:-1] = by_kind[ev.kind]
    code[-1] = _WAITING
    calls = np.flatnonzero(kind_mask(ev.kind, LAUNCH_KINDS))
    names = ev.name[calls]
    code[calls[member_mask(names, sync_name_codes(trace), len(ev.names))]] |= _SYNC
    queries = query_name_codes(trace)
    if len(queries):
        code[calls[member_mask(names, queries, len(ev.names))]] |= _POLL | _WAITING
    del calls, names
    code[launches] |= _LAUNCH
    seg = code[owner]
    del code
    cat = _CATEGORY_OF[seg]
    cat[in_loader] = Category.DATA_LOADING  # (in_loader holds only segments in a range)
    waiting = (seg & _WAITING) != 0
    polls = (seg & _POLL) != 0 if len(queries) else None
    del seg
    item = np.full(len(owner), -1, dtype=np.int64)
    op = np.flatnonzero(cat == Category.HOST_COMPUTE)
    item[op] = table.ids("op", ev.name[owner[op]], ev.names.__getitem__)
    item[cat == Category.DATA_LOADING] = table.id("data_loader", "DataLoader")
    item[cat == Category.LAUNCH_OVERHEAD] = table.id("launches", "kernel launch calls")
    return cat, item, waiting, polls


def device_categories(trace: Trace, events: np.ndarray,
                      table: ItemTable) -> tuple[np.ndarray, np.ndarray]:
    """(Category, item) of device events (kernels, copies, memsets)."""
    ev = trace.events
    kind = ev.kind[events]
    comm = (kind == Kind.KERNEL) & ((ev.flags[events] & FLAG_COMM) != 0)
    compute = (kind == Kind.KERNEL) & ~comm
    cat = np.full(len(events), Category.COPIES, dtype=np.uint8)
    cat[compute] = Category.GPU_COMPUTE
    cat[comm] = Category.GPU_COMMUNICATION
    item = np.empty(len(events), dtype=np.int64)
    names = ev.name[events]
    item[compute] = table.ids("kernel", names[compute], ev.names.__getitem__)
    item[comm] = table.ids("collective", names[comm], lambda c: collective_type(ev.names[c]))
    copies = cat == Category.COPIES
    item[copies] = table.ids("copy", names[copies], ev.names.__getitem__)
    return cat, item


def loader_mask(trace: Trace, events: np.ndarray) -> np.ndarray:
    """Whether each event carries the DataLoader flag."""
    return (trace.events.flags[events] & FLAG_DATALOADER) != 0


@per_trace
def sync_name_codes(trace: Trace) -> np.ndarray:
    """The name codes of the runtime and driver calls that block on the device (cached on the
    trace: the host's categories and its sync waits both ask)."""
    ev = trace.events
    seen = np.zeros(len(ev.names), dtype=bool)  # the names used by these calls, in code order
    seen[ev.name[kind_mask(ev.kind, LAUNCH_KINDS)]] = True
    used = np.flatnonzero(seen)
    return np.array([c for c in used.tolist() if sync_call_kind(Kind.RUNTIME, ev.names[c])],
                    dtype=np.int64)



@per_trace
def query_name_codes(trace: Trace) -> np.ndarray:
    """The name codes of the runtime and driver calls that poll the device (QUERY_CALLS)."""
    ev = trace.events
    seen = np.zeros(len(ev.names), dtype=bool)
    seen[ev.name[kind_mask(ev.kind, LAUNCH_KINDS)]] = True
    return np.array([c for c in np.flatnonzero(seen).tolist() if QUERY_CALLS.match(ev.names[c])],
                    dtype=np.int64)


def kind_mask(kinds: np.ndarray, of: Iterable[int]) -> np.ndarray:
    """Whether each of ``kinds`` (Kind codes, 0 to 255) is one of ``of``: a table look-up."""
    table = np.zeros(256, dtype=bool)
    table[list(of)] = True
    return table[kinds]


def member_mask(values: np.ndarray, members: np.ndarray, size: int) -> np.ndarray:
    """Whether each of ``values`` (indices below ``size``, or -1 for none) is in ``members``:
    a table look-up, not a search."""
    table = np.zeros(size + 1, dtype=bool)  # the last entry is -1's
    table[members] = True
    return table[values]
