"""A tiny Lightning module, its loader and a CPU Trainer for the callback's tests (imported by
the tests and by the child process that runs two profilers at once)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch


class TinyModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def trainer(callback, tmp_path, **kwargs):
    return pl.Trainer(
        accelerator="cpu", devices=1, max_steps=8, callbacks=[callback], default_root_dir=tmp_path,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        **kwargs,
    )


def loader():
    data = torch.utils.data.TensorDataset(torch.randn(128, 16), torch.randint(0, 4, (128,)))
    return torch.utils.data.DataLoader(data, batch_size=8)
