"""Allocation sites of a memory snapshot: the line of the user's code each block comes from.

A block's `frames` are its stack, innermost first, Python frames interleaved with C++ ones when
history was recorded with `stacks="all"` (the default). Its site is the first Python frame
outside PyTorch and trainprof (`frames.site_key`), so a Linear's weight gradient is charged to
the line that called the model, not to `torch/nn/modules/linear.py` nor to the allocator's
`gather_with_cpp()`. Sites are grouped by file, line and function.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msgspec import field

from trainprof.analysis.snapshot.frames import (
    NO_STACK,
    Judged,
    SiteKey,
    frame_text,
    is_python_frame,
    site_key,
)
from trainprof.structs import Record

__all__ = ["NO_STACK", "Site", "history_sites", "live_block_sites", "site_of", "top_sites"]

#: Sites listed per view (live blocks, allocations over the history).
TOP_SITES = 10
#: Frames kept of each site's example stack, innermost first.
STACK_FRAMES = 12


class Site(Record):
    """Where allocations come from: the first user frame (`site`, and its `file`, `line`,
    `function`), the bytes and blocks charged to it, and the stack of its largest block."""

    json_internal = frozenset({"_largest"})

    site: str
    file: str = ""
    line: int = 0
    function: str = ""
    bytes: int = 0
    count: int = 0
    stack: list[str] = field(default_factory=list)
    _largest: int = -1


def site_of(frames: Any) -> str:
    """The site of a stack as text: `file:line in function`, or a label without one."""
    return site_key(frames).text


#: C++ frames of the recording itself (the unwinder, the allocator): never shown in a stack.
_PLUMBING = ("unwind::unwind", "gather_with_cpp", "CapturedTraceback", "CUDACachingAllocator")


def shown_frames(frames: list[Any]) -> list[Any]:
    """The Python frames of a stack (C++ and interpreter frames left out); for a C++-only stack,
    its frames below the unwinder's and the allocator's own."""
    python = [f for f in frames if is_python_frame(f)]
    if python:
        return python
    return [f for f in frames if not any(p in frame_text(f) for p in _PLUMBING)] or frames


def _site(key: SiteKey) -> Site:
    return Site(key.text, key.file, key.line, key.function if key.file else "")


def top_sites(items: Iterable[tuple[int, Any]], top: int = TOP_SITES) -> list[Site]:
    """The `top` sites by bytes, from (bytes, frames) pairs."""
    sites: dict[SiteKey, Site] = {}
    by_frames: dict[int, SiteKey] = {}  # stacks are shared objects in a snapshot: name each once
    seen: dict[int, Judged] = {}  # and so are frames, between stacks
    largest: dict[SiteKey, list[Any]] = {}  # the stack of each site's largest block
    for nbytes, frames in items:
        key = by_frames.get(id(frames)) if isinstance(frames, list) else None
        if key is None:
            key = site_key(frames, seen)
            if isinstance(frames, list):
                by_frames[id(frames)] = key
        site = sites.get(key)
        if site is None:
            site = sites[key] = _site(key)
        site.bytes += nbytes
        site.count += 1
        if nbytes > site._largest and isinstance(frames, list):
            site._largest = nbytes
            largest[key] = frames
    kept = sorted(sites.values(), key=lambda s: (-s.bytes, s.site))[:top]
    shown = {id(site) for site in kept}
    for key, site in sites.items():  # the stack's text, for the sites kept only
        if key in largest and id(site) in shown:
            site.stack = [frame_text(f) for f in shown_frames(largest[key])[:STACK_FRAMES]]
    return kept


def live_block_sites(segments: list[dict[str, Any]], top: int = TOP_SITES) -> list[Site]:
    """Blocks in use at the snapshot (allocated, or freed but awaiting another stream), by site."""
    return top_sites(((int(b.get("size", 0)), b.get("frames"))
                      for seg in segments for b in seg.get("blocks", [])
                      if b.get("state") in ("active_allocated", "active_pending_free")), top)


def history_sites(entries: list[dict[str, Any]], top: int = TOP_SITES) -> list[Site]:
    """Allocations made over the recorded history, by site (bytes allocated, not live)."""
    return top_sites(((int(e.get("size", 0)), e.get("frames"))
                      for e in entries if e.get("action") == "alloc"), top)
