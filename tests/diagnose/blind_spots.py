"""Two small real CPU training runs the rules once missed, and their healthy controls.

``record(kind, out)`` trains a small MLP for a few steps under torch.profiler
(``record_shapes=True``) and writes ``out/rank0.json``:

- ``fp64``: the model and its batches in float64, as ``torch.from_numpy`` of NumPy arrays and
  ``model.double()`` leave them; ``fp32``: the same run in float32 (the control);
- ``eval_every_step``: a validation pass over VAL_BATCHES batches under ``no_grad`` after the
  optimizer in every step; ``no_eval``: the same loop without it (the control).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

torch.set_num_threads(1)  # two cores shared with other work

BATCH, FEATURES, HIDDEN, CLASSES = 128, 256, 512, 10
#: Profiler schedule: steps skipped, warmed up, recorded.
WAIT, WARMUP, ACTIVE = 1, 1, 4
VAL_BATCHES = 6
KINDS = ("fp64", "fp32", "eval_every_step", "no_eval")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def _arrays(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """NumPy batches: float64 features (NumPy's default), int64 labels."""
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((BATCH, FEATURES)), rng.integers(0, CLASSES, BATCH))
            for _ in range(count)]


def _validate(model: nn.Module, batches: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for x in batches:
            model(x)


def record(kind: str, out: Path, with_stack: bool = False) -> Path:
    """Train under torch.profiler; writes ``out/rank0.json`` and returns the file."""
    assert kind in KINDS, kind
    model = _model()
    if kind == "fp64":
        model = model.double()
    steps = _arrays(WAIT + WARMUP + ACTIVE)
    batches = [(torch.from_numpy(x) if kind == "fp64" else torch.from_numpy(x).float(),
                torch.from_numpy(y)) for x, y in steps]
    val = [x for x, _ in batches[:VAL_BATCHES]]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    out.mkdir(parents=True, exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=with_stack,
                 schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE)) as prof:
        for x, y in batches:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            if kind == "eval_every_step":
                _validate(model, val)
            prof.step()
    path = out / "rank0.json"
    prof.export_chrome_trace(str(path))
    return path
