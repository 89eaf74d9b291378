"""What was live at the moment of the peak, from the allocator's history (`device_traces`).

The snapshot's blocks are the state at its end; the history's entries (`alloc`, `free_requested`,
`free_completed`, `segment_*`, `oom`, `snapshot`) lead up to it. Walking the history backwards
from the end state gives the live blocks at any entry exactly, older entries dropped from the
ring buffer or not: an `alloc` after the peak was not live at it, a block `free_completed` after
the peak was. A block freed after the peak is named by the `alloc` entry that made it (its
frames), or, when that entry was dropped, by the free's own stack (`context="all"`).
"""

from __future__ import annotations

from typing import Any

from msgspec import field

from trainprof.analysis.snapshot.holders import by_holder
from trainprof.analysis.snapshot.sites import Site, top_sites
from trainprof.structs import Record

#: Actions that change live bytes (as in history.py: live falls when the block is reusable).
_ALLOC, _FREED = "alloc", "free_completed"


class PeakState(Record):
    """One device's live blocks at its peak: bytes by holder, the top sites, and when."""

    device: int
    entry: int  # index in the device's history of the entry that reached the peak
    live: int  # bytes live just after it
    ms: float | None  # from the history's first entry, when entries have times
    step: int | None  # the ProfilerStep#N it fell in, when known
    holders: dict[str, int] = field(default_factory=dict)
    sites: list[Site] = field(default_factory=list)
    holder_sites: dict[str, list[Site]] = field(default_factory=dict)


def live_blocks(segments: list[dict[str, Any]], device: int) -> dict[int, tuple[int, Any]]:
    """address -> (size, frames) of the blocks in use on a device at the snapshot."""
    out: dict[int, tuple[int, Any]] = {}
    for seg in segments:
        if int(seg.get("device", 0) or 0) != device:
            continue
        address = int(seg.get("address", 0) or 0)
        for b in seg.get("blocks", []):
            addr = int(b.get("address", address))
            if b.get("state") in ("active_allocated", "active_pending_free"):
                out[addr] = (int(b.get("size", 0)), b.get("frames"))
            address = addr + int(b.get("size", 0))
    return out


def live_at(entries: list[dict[str, Any]], index: int,
            at_end: dict[int, tuple[int, Any]]) -> dict[int, tuple[int, Any]]:
    """The live blocks just after `entries[index]`, from those live at the end of the history:
    one walk backwards, which goes on past `index` only until each block freed after it has
    met the `alloc` that made it (its frames)."""
    live = dict(at_end)
    unnamed: set[int] = set()  # freed after the peak, named by the free's stack for now
    for k in range(len(entries) - 1, -1, -1):
        if k <= index and not unnamed:
            break
        e = entries[k]
        action, addr = e.get("action"), e.get("addr")
        if not isinstance(addr, int):
            continue
        if action == _ALLOC:
            if k > index:
                live.pop(addr, None)
                unnamed.discard(addr)
            elif addr in unnamed:
                unnamed.discard(addr)
                live[addr] = (live[addr][0], e.get("frames"))
        elif action == _FREED and k > index:
            live[addr] = (int(e.get("size", 0) or 0), e.get("frames"))
            unnamed.add(addr)
    return live


def peak_state(device: int, entries: list[dict[str, Any]], peak_entry: int,
               segments: list[dict[str, Any]], ms: float | None, step: int | None) -> PeakState:
    """The live blocks at the history's peak (`peak_entry`), by holder and by site."""
    live = live_at(entries, peak_entry, live_blocks(segments, device))
    items = list(live.values())
    holders, holder_sites = by_holder(items)
    return PeakState(device, peak_entry, sum(size for size, _ in items), ms, step, holders,
                     top_sites(items), holder_sites)
