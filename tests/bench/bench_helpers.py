"""Small real workloads for the strategy benchmark and the checklist (module level, so that
`isolate=True` can send them to a new process)."""

from __future__ import annotations

import ctypes
import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FEATURES = 32
CLASSES = 4
BATCH = 8
#: The per-parameter optimizer's model: this many tiny parameter tensors (as the diagnosis
#: pathology suite's, tests/diagnose/workloads.py).
TINY_PARAMS = 400
#: Seconds the slow dataset sleeps per sample: 16 ms a batch, against well under 1 ms of compute.
SLOW_SAMPLE_S = 0.002
#: Bytes the memory-hungry strategy holds on to.
BIG_BUFFER_BYTES = 256 * 2**20


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread while a benchmark test trains: two cores are shared with other work.
    Autouse in every module that imports it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def small_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(BATCH, FEATURES, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen)


class TinyParams(nn.Module):
    """The MLP plus hundreds of tiny parameters: a per-parameter optimizer pays its Python and
    dispatch cost once per tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.body = small_mlp()
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(4)) for _ in range(TINY_PARAMS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x) + torch.stack(list(self.scales)).sum()


def adam(params) -> torch.optim.Optimizer:  # noqa: ANN001
    return torch.optim.Adam(params, lr=1e-3)


def rmsprop(params) -> torch.optim.Optimizer:  # noqa: ANN001
    return torch.optim.RMSprop(params, lr=1e-3)


class Samples(Dataset):
    """Random samples; `delay_s` of sleep per sample stands in for a slow decoder."""

    def __init__(self, count: int, delay_s: float = 0.0) -> None:
        gen = torch.Generator().manual_seed(1)
        self.x = torch.randn(count, FEATURES, generator=gen)
        self.y = torch.randint(0, CLASSES, (count,), generator=gen)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


def loader(delay_s: float = 0.0, count: int = 512) -> DataLoader:
    return DataLoader(Samples(count, delay_s), batch_size=BATCH, shuffle=True)


def crash(model: nn.Module) -> nn.Module:
    """A strategy that brings its process down with a segmentation fault."""
    ctypes.string_at(0)
    return model


def hang(model: nn.Module) -> nn.Module:
    """A strategy that never finishes."""
    time.sleep(3600)
    return model


def broken(model: nn.Module) -> nn.Module:
    raise ValueError("this strategy is broken on purpose")


def hold_big_buffer(model: nn.Module) -> nn.Module:
    """A strategy that keeps BIG_BUFFER_BYTES resident while it trains."""
    model.register_buffer("ballast", torch.ones(BIG_BUFFER_BYTES // 4))
    return model


#: The token model's vocabulary and sequence length.
VOCAB, SEQ = 50, 16


class TokenModel(nn.Module):
    """Embeds (batch, seq) token ids and returns the mean next-token loss itself."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(tokens[:, :-1]))
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def token_batch() -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(2))
