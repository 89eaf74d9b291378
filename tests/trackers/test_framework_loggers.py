"""Logging into the run a framework already has: Lightning's loggers, accelerate's trackers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

import trainprof  # noqa: E402
from trainprof.integrations.lightning import TrainprofCallback  # noqa: E402

from tiny_training import tiny, train  # noqa: E402

pytestmark = pytest.mark.slow


class TinyModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _scalars(folder):
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return events


def test_the_lightning_callback_logs_into_the_trainers_tensorboard(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path, name="run")
    callback = TrainprofCallback(log_to=True, output_trace_dir=str(tmp_path / "traces"),
                                 schedule_option={"wait": 1, "warmup": 1, "active": 3})
    data = torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
    pl.Trainer(accelerator="cpu", devices=1, max_steps=6, callbacks=[callback], logger=logger,
               log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, default_root_dir=tmp_path).fit(
        TinyModule(), torch.utils.data.DataLoader(data, batch_size=8))
    events = _scalars(logger.log_dir)
    assert "loss" in events.Tags()["scalars"]  # the user's own metrics, in the same folder
    steps = events.Scalars("trainprof/step_ms")
    assert len(steps) == 3 and all(s.value > 0 for s in steps)
    assert (tmp_path / "run/version_0/trainprof/trainprof-report.html").is_file()


def test_the_step_timer_logs_into_accelerates_tensorboard_tracker(tmp_path):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
    accelerator.init_trackers("proj")
    model, optimizer = tiny()
    with trainprof.StepTimer(model, optimizer, log_every=None, log_to=accelerator) as timer:
        train(timer, model, optimizer)
    accelerator.end_training()
    logdir = accelerator.get_tracker("tensorboard").logging_dir
    steps = _scalars(logdir).Scalars("trainprof/step_ms")
    assert [s.step for s in steps] == list(range(6))


def test_the_accelerate_profile_logs_its_analysis_into_log_with(tmp_path):
    from accelerate import Accelerator

    from trainprof.integrations.accelerate import profile

    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
    accelerator.init_trackers("proj")
    model, optimizer = tiny()
    with profile(accelerator, log_to=True, output_trace_dir=str(tmp_path / "traces"),
                 schedule_option={"wait": 1, "warmup": 1, "active": 3}) as prof:
        for _ in range(6):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    accelerator.end_training()
    logdir = accelerator.get_tracker("tensorboard").logging_dir
    assert len(_scalars(logdir).Scalars("trainprof/step_ms")) == 3
    assert prof.trace_files and (tmp_path / "proj/trainprof/trainprof-analysis.json").is_file()
