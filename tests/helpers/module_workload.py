"""A small nested model with known structure, trained for a few steps under trainprof.profile
with module events, and an independent reader of the trace it writes (plain json)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

#: Steps recorded (after one warm-up step).
ACTIVE_STEPS = 2


def record_nested_model(out_dir: Path) -> Path:
    """Trains Net(Block(Linear small, Heavy), Linear head) on the CPU; Heavy does a big
    matmul, so it holds most of the time. Returns the trace file."""
    import torch
    from torch import nn

    import trainprof

    class Heavy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(512, 512) / 32)
            self.proj = nn.Linear(512, 16)

        def forward(self, x):
            wide = x.repeat(1, 32)  # (batch, 512)
            for _ in range(4):
                wide = torch.tanh(wide @ self.weight)
            return self.proj(wide)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.small = nn.Linear(16, 16)
            self.heavy = Heavy()

        def forward(self, x):
            return self.heavy(torch.relu(self.small(x)))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Block()
            self.head = nn.Linear(16, 2)

        def forward(self, x):
            return self.head(self.block(x))

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 16)
    schedule = {"wait": 0, "warmup": 1, "active": ACTIVE_STEPS, "repeat": 1}
    with trainprof.profile(output_trace_dir=out_dir, activities=["cpu"], schedule_option=schedule,
                           with_stack=True, with_modules=True, ranks=None) as prof:
        for _ in range(ACTIVE_STEPS + 2):
            loss = model(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    (trace,) = sorted(Path(out_dir).glob("*.pt.trace.json.gz"))
    return trace


def read_events(path: Path) -> list[dict]:
    """The trace's events, read with the standard library."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def step_windows(events: list[dict]) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]


def inside(ts: float, windows: list[tuple[float, float]]) -> bool:
    return any(a <= ts < b for a, b in windows)


#: A module name that would break HTML or Markdown if written unescaped.
HOSTILE = "<b>Inner|*</b>"


def synthetic_gpu_modules(builder, inner: str = "Inner") -> None:
    """One step of 1,000 µs: Outer_0 calls ``inner``_0, whose matmul launches an 80 µs kernel;
    Outer_0 itself launches a 20 µs kernel; the matmul's backward runs on another thread
    (linked by a fwdbwd flow) and launches a 150 µs kernel."""
    b = builder
    b.step(1, 0, 1000)
    b.event("python_function", "nn.Module: Outer_0", 10, 390)
    b.event("python_function", f"nn.Module: {inner}_0", 50, 250)
    mm = b.op("aten::mm", 60, 100)
    b.launch(70, 10, name="gemm", k_ts=120, k_dur=80, external_id=mm["args"]["External id"])
    add = b.op("aten::add", 320, 30)
    b.launch(325, 5, name="add_kernel", k_ts=330, k_dur=20, external_id=add["args"]["External id"])
    back = b.op("MmBackward0", 500, 200, tid=200)
    b.launch(510, 10, name="gemm_bwd", k_ts=520, k_dur=150, tid=200,
             external_id=back["args"]["External id"])
    for ph, tid, ts in (("s", 100, 60), ("f", 200, 500)):
        b.events.append({"ph": ph, "id": 1, "pid": b.pid, "tid": tid, "ts": b.base + ts,
                         "cat": "fwdbwd", "name": "fwdbwd", **({"bp": "e"} if ph == "f" else {})})
