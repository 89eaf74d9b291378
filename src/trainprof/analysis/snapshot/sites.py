"""Allocation sites of a memory snapshot: the line of the user's code each block comes from.

A block's `frames` are its Python stack, innermost first. Its site is the innermost frame that is
not PyTorch's own code (torch's modules, C++ frames, `<frozen ...>`), so a Linear's weight
gradient is charged to the line that called the model, not to `torch/nn/modules/linear.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Sites listed per view (live blocks, allocations over the history).
TOP_SITES = 10
#: Frames kept of each site's example stack, innermost first.
STACK_FRAMES = 12
NO_STACK = "(no stack recorded)"
_FRAMEWORK_PARTS = ("/torch/", "/trainprof/capture/")
_PROFILE_FRAME = re.compile(r"^(.+)\((\d+)\): (.+)$")


@dataclass
class Site:
    """Where allocations come from: the first user frame, the bytes and blocks charged to it,
    and the stack of its largest block."""

    site: str
    bytes: int = 0
    count: int = 0
    stack: list[str] = field(default_factory=list)
    _largest: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "bytes": self.bytes, "count": self.count, "stack": self.stack}


def _where(frame: dict[str, Any]) -> tuple[str, Any, str]:
    """(file, line, function). Snapshots that torch converts from a profile
    (`_memory_viz._profile_to_snapshot`) name no file and put `path(line): function` in the
    name; their other frames (`<built-in ...>`, `nn.Module: Linear_0`) have no file at all."""
    filename, line, name = str(frame.get("filename", "")), frame.get("line", "?"), str(frame.get("name", "?"))
    if filename in ("", "none"):
        match = _PROFILE_FRAME.match(name)
        return (match.group(1), int(match.group(2)), match.group(3)) if match else ("", line, name)
    return filename, line, name


def frame_text(frame: Any) -> str:
    """`file:line in name`, from a frame dict; a frame of another shape as its text."""
    if not isinstance(frame, dict):
        return str(frame)
    filename, line, name = _where(frame)
    return f"{filename}:{line} in {name}" if filename else name


def is_framework_frame(frame: Any) -> bool:
    """PyTorch's own code (and trainprof's recorder), or a frame with no file: never a site."""
    if not isinstance(frame, dict):
        return True
    filename = _where(frame)[0]
    path = "/" + filename.replace("\\", "/")  # relative (torch/nn/...) and Windows paths too
    return (filename.startswith(("<frozen", "??")) or not filename
            or any(part in path for part in _FRAMEWORK_PARTS))


def site_of(frames: Any) -> str:
    """The innermost frame outside PyTorch, else the innermost frame, else `NO_STACK`."""
    if not isinstance(frames, list) or not frames:
        return NO_STACK
    for frame in frames:
        if not is_framework_frame(frame):
            return frame_text(frame)
    return frame_text(frames[0])


def top_sites(items: Iterable[tuple[int, Any]], top: int = TOP_SITES) -> list[Site]:
    """The `top` sites by bytes, from (bytes, frames) pairs."""
    sites: dict[str, Site] = {}
    by_frames: dict[int, str] = {}  # stacks are shared objects in a snapshot: name each once
    for nbytes, frames in items:
        key = by_frames.get(id(frames)) if isinstance(frames, list) else None
        if key is None:
            key = site_of(frames)
            if isinstance(frames, list):
                by_frames[id(frames)] = key
        site = sites.get(key)
        if site is None:
            site = sites[key] = Site(key)
        site.bytes += nbytes
        site.count += 1
        if nbytes > site._largest and isinstance(frames, list):
            site._largest = nbytes
            site.stack = [frame_text(f) for f in frames[:STACK_FRAMES]]
    return sorted(sites.values(), key=lambda s: (-s.bytes, s.site))[:top]


def live_block_sites(segments: list[dict[str, Any]], top: int = TOP_SITES) -> list[Site]:
    """Blocks in use at the snapshot (allocated, or freed but awaiting another stream), by site."""
    return top_sites(((int(b.get("size", 0)), b.get("frames"))
                      for seg in segments for b in seg.get("blocks", [])
                      if b.get("state") in ("active_allocated", "active_pending_free")), top)


def history_sites(entries: list[dict[str, Any]], top: int = TOP_SITES) -> list[Site]:
    """Allocations made over the recorded history, by site (bytes allocated, not live)."""
    return top_sites(((int(e.get("size", 0)), e.get("frames"))
                      for e in entries if e.get("action") == "alloc"), top)
