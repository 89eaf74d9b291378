"""``trainprof run --log-to tensorboard``: the run's analysis reaches the tracker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from helpers.paths import ROOT

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

SCRIPT = textwrap.dedent("""
    import torch

    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(6):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""")


def _run(args, cwd, **env):
    return subprocess.run([sys.executable, "-m", "trainprof", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": str(ROOT / "src"), **env})


@pytest.mark.slow
def test_run_logs_the_analysis_of_the_recorded_steps(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    result = _run(["run", "--out", "traces", "--wait", "1", "--warmup", "1", "--active", "2",
                   "--log-to", "tensorboard", "--", "train.py"], tmp_path,
                  TENSORBOARD_LOGDIR=str(tmp_path / "tb"))
    assert result.returncode == 0, result.stderr
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("trainprof/step_ms")] == [2, 3]
    assert (tmp_path / "tb/trainprof/trainprof-report.html").is_file()


def test_run_without_the_tracker_package_stops_before_the_script(tmp_path):
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    code = ("import sys; sys.modules['wandb'] = None; from trainprof.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "run", "--log-to", "wandb", "--",
                             "train.py"], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode == 2
    assert "pip install 'trainprof[wandb]'" in result.stderr
    assert not (tmp_path / "ran").exists()
