"""The workload `trainprof demo` records: a small CNN whose data loading is the bottleneck.

Each sample is "decoded" in pure Python (as a slow image decoder or augmentation would be) in
the main process (`num_workers=0`), so the DataLoader takes most of every step: the textbook
case that the analysis should catch, and that `num_workers` fixes.

The model runs on one intra-op thread: on a machine whose cores are busy with other work, torch's
threads wait for each other at every operator and the convolutions slow down tenfold (on a loaded
2-core machine the step grew from 30 to 300 ms, and the loader fell to 12% of it); one thread keeps
the step what the model costs, wherever the demo runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainprof.capture.profiler import profile

BATCH_SIZE = 32
IMAGE_SIZE = 24
CLASSES = 10
#: Recorded steps at most; the trace stays around a megabyte.
MAX_ACTIVE_STEPS = 10
#: Intra-op threads while the demo trains (restored afterwards); see the module docstring.
DEMO_THREADS = 1


class SlowlyDecodedImages(Dataset):
    """Synthetic images "decoded" and "augmented" pixel by pixel in Python: a millisecond or two
    per sample on a laptop."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        phase = index * 0.37
        pixels = [
            math.sin(phase + 0.05 * row) * math.cos(0.07 * col + channel)
            for channel in range(3)
            for row in range(IMAGE_SIZE)
            for col in range(IMAGE_SIZE)
        ]
        mean = sum(pixels) / len(pixels)
        pixels = [max(-1.0, min(1.0, 1.2 * (p - mean))) for p in pixels]  # contrast, clipped
        image = torch.tensor(pixels, dtype=torch.float32).view(3, IMAGE_SIZE, IMAGE_SIZE)
        return image, index % CLASSES


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * (IMAGE_SIZE // 4) ** 2, 128), nn.ReLU(), nn.Linear(128, CLASSES),
    )


def demo_schedule(steps: int) -> dict[str, int]:
    """One recorded cycle in the steady state: wait a third of the run, warm up, record."""
    wait = min(10, steps // 3)
    active = max(1, min(MAX_ACTIVE_STEPS, steps - wait - 1))
    return {"wait": wait, "warmup": 1, "active": active, "repeat": 1}


def record_demo(out_dir: Path, steps: int = 30) -> Path:
    """Trains the demo model for `steps` steps on the CPU, recorded; returns the trace folder.

    Earlier demo traces (`rank*.step*.pt.trace.json.gz`) in `out_dir` are removed first, so the
    folder holds this run only.
    """
    if steps < 2:
        raise ValueError("the demo needs at least 2 steps (one to warm the profiler up, one to record)")
    out_dir = Path(out_dir)
    for old in out_dir.glob("rank*.step*.pt.trace.json.gz"):
        old.unlink()
    threads = torch.get_num_threads()
    torch.set_num_threads(DEMO_THREADS)
    try:
        return _train_recorded(out_dir, steps)
    finally:
        torch.set_num_threads(threads)


def _train_recorded(out_dir: Path, steps: int) -> Path:
    torch.manual_seed(0)
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(SlowlyDecodedImages(steps * BATCH_SIZE), batch_size=BATCH_SIZE, num_workers=0)
    loss_fn = nn.CrossEntropyLoss()
    with profile(
        output_trace_dir=out_dir,
        activities=["cpu"],
        schedule_option=demo_schedule(steps),
        record_shapes=True,
        profile_memory=True,
        ranks=None,
    ) as prof:
        for images, labels in loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            prof.step()
    return out_dir
