"""Memory snapshots built in the tests, in `torch.cuda.memory._snapshot`'s documented format.

`SnapshotBuilder` lays out segments and blocks by hand (known fragmentation, known sites);
`AllocatorReplay` runs allocations and frees through a toy allocator that writes the history
(`device_traces`, `external_annotations`) and ends with matching segments and blocks.
"""

from __future__ import annotations

from typing import Any

MiB = 1 << 20
TORCH_LINEAR = ("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward")
TORCH_MODULE = ("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1762, "_call_impl")


def frames(*stack: tuple[str, int, str]) -> list[dict[str, Any]]:
    """A stack, innermost first, as snapshot frames."""
    return [{"filename": f, "line": line, "name": name} for f, line, name in stack]


class SnapshotBuilder:
    """Segments of blocks laid out by hand; each segment's blocks must fill it."""

    def __init__(self) -> None:
        self.segments: list[dict[str, Any]] = []
        self.device_traces: list[list[dict[str, Any]]] = [[]]
        self.annotations: list[dict[str, Any]] = []
        self._next_address = 0x7F0000000000

    def segment(self, blocks: list[tuple[int, str] | tuple[int, str, list[dict[str, Any]]]],
                kind: str = "large", device: int = 0, requested: dict[int, int] | None = None
                ) -> dict[str, Any]:
        """A segment of `(size, state[, frames])` blocks, in address order."""
        address = self._next_address
        total = sum(b[0] for b in blocks)
        out_blocks = []
        for i, block in enumerate(blocks):
            size, state = block[0], block[1]
            out_blocks.append({
                "address": address, "size": size, "state": state,
                "requested_size": (requested or {}).get(i, size if state != "inactive" else 0),
                "frames": block[2] if len(block) > 2 else []})
            address += size
        active = [b for b in out_blocks if b["state"] != "inactive"]
        seg = {"device": device, "address": self._next_address, "total_size": total,
               "allocated_size": sum(b["size"] for b in active if b["state"] == "active_allocated"),
               "active_size": sum(b["size"] for b in active),
               "requested_size": sum(b["requested_size"] for b in active), "stream": 0,
               "segment_type": kind, "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": [], "blocks": out_blocks}
        self._next_address = address + (1 << 30)
        self.segments.append(seg)
        return seg

    def trace(self, action: str, size: int, addr: int = 0, time_us: int = 0, device: int = 0,
              **extra: Any) -> None:
        while len(self.device_traces) <= device:
            self.device_traces.append([])
        entry = {"action": action, "size": size, "stream": 0, "time_us": time_us, "frames": [], **extra}
        entry["device_free" if action == "oom" else "addr"] = extra.get("device_free", addr)
        self.device_traces[device].append(entry)

    def snapshot(self) -> dict[str, Any]:
        return {"segments": self.segments, "device_traces": self.device_traces,
                "external_annotations": self.annotations,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False}}


class AllocatorReplay:
    """A toy first-fit allocator over one large segment; at the end, the live blocks with the
    free space between them as inactive blocks."""

    def __init__(self, segment_size: int = 512 * MiB, device: int = 0) -> None:
        self.builder = SnapshotBuilder()
        self.device = device
        self.segment_size = segment_size
        self.time_us = 1_000
        self.live: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        self.builder.trace("segment_alloc", segment_size, 0, self.time_us, device)

    def start_history(self) -> None:
        """History recording begins now: what is live stays, the entries so far are dropped."""
        self.builder.device_traces[self.device].clear()

    def alloc(self, size: int, stack: list[dict[str, Any]] | None = None) -> int:
        """First fit: the lowest free address where `size` bytes fit."""
        assert size > 0
        self.time_us += 10
        at = 0
        for start in sorted(self.live):
            if start - at >= size:
                break
            at = start + self.live[start][0]
        addr = at
        assert addr + size <= self.segment_size, "the toy segment is full"
        self.live[addr] = (size, stack or [])
        self.builder.trace("alloc", size, addr, self.time_us, self.device, frames=stack or [])
        return addr

    def free(self, addr: int) -> None:
        size, stack = self.live.pop(addr)
        for action in ("free_requested", "free_completed"):
            self.time_us += 5
            self.builder.trace(action, size, addr, self.time_us, self.device, frames=stack)

    def step(self, number: int, work) -> None:
        """Runs `work()` inside `ProfilerStep#number` annotations."""
        self.time_us += 100
        self.builder.annotations.append({"name": f"ProfilerStep#{number}", "stage": "START",
                                         "device": self.device, "time_us": self.time_us})
        work()
        self.time_us += 100
        self.builder.annotations.append({"name": f"ProfilerStep#{number}", "stage": "END",
                                         "device": self.device, "time_us": self.time_us})

    def snapshot(self, history: bool = True) -> dict[str, Any]:
        blocks, at = [], 0
        for addr in sorted(self.live):
            if addr > at:
                blocks.append((addr - at, "inactive"))
            size, stack = self.live[addr]
            blocks.append((size, "active_allocated", stack))
            at = addr + size
        if at < self.segment_size:
            blocks.append((self.segment_size - at, "inactive"))
        self.builder.segment(blocks, device=self.device)
        snap = self.builder.snapshot()
        if not history:
            snap["device_traces"] = [[]]
        return snap
