"""The live view: a real training loop with `StepTimer(live=True)` in a real pseudo-terminal, its
log-line fallback when output is not a terminal, and the top finding from the rules' thresholds."""

from __future__ import annotations

import os
import re
import sys
import textwrap

import pexpect
import pyte
import pytest
import torch
from rich.console import Console

import trainprof
from trainprof.capture.live import LiveView
from trainprof.capture.live_figures import LiveFigures, top_finding
from trainprof.capture.step_times import Window
from trainprof.diagnose.findings import SAVING_SEVERITY
from trainprof.diagnose.rules.host import STEP_CV
from trainprof.diagnose.rules.input import DATA_LOADING_PCT
from trainprof.diagnose.rules.training import OPTIMIZER_PCT

from capture_helpers import TinyTraining, run_python

COLUMNS, LINES = 120, 40
TRAIN = textwrap.dedent(
    """
    import time
    import torch
    import trainprof

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    class SlowData(torch.utils.data.Dataset):  # 8 ms to make each batch of 16: data-bound
        def __len__(self):
            return 16 * 80

        def __getitem__(self, i):
            if i % 16 == 0:
                time.sleep(0.008)
            return torch.randn(32), i % 4

    loader = torch.utils.data.DataLoader(SlowData(), batch_size=16)
    timer = trainprof.StepTimer(model, optimizer, live=True, log_every=None)
    with timer:
        for i, (x, y) in enumerate(timer.wrap(loader)):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i == 40:
                print("halfway there")
    print("training finished")
    """
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def train_script(tmp_path):
    path = tmp_path / "train_live.py"
    path.write_text(TRAIN)
    return path


@pytest.mark.slow
def test_the_panel_in_a_real_terminal_shows_its_fields_and_refreshes(train_script):
    env = {**os.environ, "TRAINPROF_LIVE_EVERY": "0.2", "OMP_NUM_THREADS": "1",
           "COLUMNS": str(COLUMNS), "LINES": str(LINES), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(sys.executable, [str(train_script)], cwd=str(train_script.parent),
                          env=env, dimensions=(LINES, COLUMNS), encoding="utf-8", timeout=120)
    child.expect(pexpect.EOF)
    child.close()
    raw = child.before
    assert child.exitstatus == 0, raw[-2000:]
    screen = pyte.Screen(COLUMNS, LINES)
    pyte.Stream(screen).feed(raw)  # the terminal the user would have seen
    shown = "\n".join(line.rstrip() for line in screen.display)
    panel = shown[shown.index("trainprof live · rank 0"):]
    for field in ("step time", "ms/step", "phases", "data", "forward", "backward", "optimizer",
                  "samples/s", "memory", "top finding"):
        assert field in panel, shown
    assert re.search(r"step time +[\d.]+ ms/step +median [\d.]+ +p90 [\d.]+ +[▁▂▃▄▅▆▇█]+", panel)
    assert re.search(r"[\d,]+ samples/s", panel)
    assert "Waiting for data takes" in panel and "data_loading" in panel
    assert "halfway there" in shown and "training finished" in shown  # prints pass above it
    # Redrawn in place while training: several different step counts, cursor moved back up.
    steps = {int(n) for n in re.findall(r"trainprof live · rank 0 · step (\d+)", ANSI.sub("", raw))}
    assert len(steps) >= 3 and max(steps) == 79
    assert re.search(r"\x1b\[\d*A", raw)


@pytest.mark.slow
def test_without_a_terminal_it_writes_log_lines_instead(train_script):
    env_before = os.environ.get("TRAINPROF_LIVE_EVERY")
    os.environ["TRAINPROF_LIVE_EVERY"] = "0.2"
    try:
        result = run_python([str(train_script)], cwd=train_script.parent)
    finally:
        if env_before is None:
            os.environ.pop("TRAINPROF_LIVE_EVERY")
        else:
            os.environ["TRAINPROF_LIVE_EVERY"] = env_before
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "\x1b[" not in output and "╭" not in output  # no panel, no escape codes
    lines = [line for line in result.stderr.splitlines() if line.startswith("trainprof step")]
    assert len(lines) >= 2
    for line in lines:
        assert re.match(r"trainprof step \d+: [\d.]+ ms/step \(data [\d.]+, forward [\d.]+, "
                        r"backward [\d.]+, optimizer [\d.]+, other [\d.]+\), \d+ samples/s; "
                        r"peak memory [\d.]+ [kMG]?B \(process peak RSS\); top finding: "
                        r"data_loading \((high|medium)\): Waiting for data takes \d+% of each step$",
                        line), line
    assert lines[-1].startswith("trainprof step 79:")  # the final figures, once
    assert sum(line.startswith("trainprof step 79:") for line in lines) == 1


def test_a_view_that_cannot_draw_warns_once_and_training_goes_on(tmp_path):
    training = TinyTraining()
    broken = open(tmp_path / "out.txt", "w")  # noqa: SIM115
    broken.close()  # writing to it raises ValueError, as a vanished terminal would
    timer = trainprof.StepTimer(training.model, training.optimizer, log_every=None)
    timer._live = LiveView(timer, console=Console(file=broken, force_terminal=True), every_s=1e-9)
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(12)]
    with pytest.warns(trainprof.RecordingWarning, match="live view failed") as caught:
        for x, y in timer.wrap(batches):
            training.step(x, y)
        timer.close()
    assert len([w for w in caught if "live view" in str(w.message)]) == 1
    assert training.steps_done == 12 and timer.summary()["steps"] == 11


def figures(phase_ms: list[float], recent_ms: list[float] | None = None, peak=None, total=None):
    steps = 10
    recent_ms = recent_ms or [sum(phase_ms)] * steps
    window = Window(steps=steps, total_ms=sum(phase_ms) * steps,
                    phase_ms=[p * steps for p in phase_ms], samples=None, tokens=None)
    ordered = sorted(recent_ms)
    return LiveFigures(rank=0, last_step=steps, measured=steps, elapsed_s=1.0, recent=window,
                       recent_ms=recent_ms, median_ms=ordered[len(ordered) // 2],
                       p90_ms=ordered[-1], samples_per_s=None, tokens_per_s=None, mfu=None,
                       peak_memory_bytes=peak, device_memory_bytes=total, finding=None)


def test_the_top_finding_follows_the_rules_thresholds():
    def data_share(pct: float):  # data, forward, backward, optimizer, other in ms of 100
        return figures([pct, (100 - pct) / 2, (100 - pct) / 2, 0.0, 0.0])

    assert top_finding(data_share(DATA_LOADING_PCT)) is None  # at the threshold: not yet
    found = top_finding(data_share(DATA_LOADING_PCT + 0.5))
    # 5.5% of the step: medium from 5% (findings.SAVING_SEVERITY, one table for every rule).
    assert found.id == "data_loading" and found.severity == "medium"
    assert SAVING_SEVERITY[1] == (5.0, "medium")
    assert top_finding(data_share(SAVING_SEVERITY[0][0] + 1)).severity == "high"
    optimizer = top_finding(figures([0.0, 40.0, 40.0, OPTIMIZER_PCT + 5, 0.0]))
    assert optimizer.id == "optimizer_overhead"
    both = top_finding(figures([30.0, 20.0, 20.0, OPTIMIZER_PCT + 5, 0.0]))
    assert both.id == "data_loading"  # the larger saving first, as the offline ranking does
    steady = [100.0] * 10
    # Two separate slow steps (two episodes, as the offline rule asks): CV well above STEP_CV.
    uneven = [100.0] * 4 + [300.0] + [100.0] * 4 + [300.0]
    assert top_finding(figures([0, 50, 50, 0, 0], steady)) is None
    variance = top_finding(figures([0, 70, 70, 0, 0], uneven))
    assert variance.id == "step_variance" and float(variance.title.split()[-1][:-1]) > STEP_CV * 100


def test_memory_findings_need_the_device_size():
    gb = 1 << 30
    assert top_finding(figures([0, 50, 50, 0, 0], peak=gb)) is None  # CPU: no share to judge
    assert top_finding(figures([0, 50, 50, 0, 0], peak=39 * gb, total=40 * gb)).id == "memory_pressure"
    assert top_finding(figures([0, 50, 50, 0, 0], peak=4 * gb, total=40 * gb)).id == "memory_headroom"
