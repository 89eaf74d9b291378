"""A tiny CPU training loop for the tracker tests."""

from __future__ import annotations

import torch

STEPS = 6


def train(timer, model, optimizer, steps: int = STEPS) -> None:
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(steps)]
    for x, y in timer.wrap(data):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def tiny():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)
