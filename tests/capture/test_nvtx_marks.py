"""NVTX step marks (``trainprof.profile(nvtx=True)``, ``trainprof run --nvtx``): a no-op that
says so once where CUDA is absent (this machine), the ranges recorded where it exists."""

from __future__ import annotations

import warnings

import pytest
import torch

import trainprof
from trainprof.capture import nvtx
from trainprof.capture.nvtx import NO_CUDA, NvtxMarks
from trainprof.capture.safety import RecordingWarning
from trainprof.cli_run import parse_run_args
from trainprof.commands.run import config_from_args

CUDA = torch.cuda.is_available()


@pytest.mark.skipif(CUDA, reason="the no-op path is the one without CUDA")
def test_without_cuda_the_marks_are_a_no_op_said_once(tmp_path, monkeypatch):
    monkeypatch.setattr(nvtx, "_said", [])  # as in a fresh process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trainprof.profile(output_trace_dir=tmp_path, nvtx=True, activities=["cpu"],
                               schedule_option={}) as prof:
            for _ in range(3):
                torch.ones(4).sum()
                prof.step()
        assert prof.steps == 3 and not prof.nvtx.active and prof.nvtx.ranges == 0
        again = NvtxMarks()  # a second recording in the same process: not said again
        again.start()
        again.step(1)
        again.stop()
    said = [w for w in caught if issubclass(w.category, RecordingWarning)
            and NO_CUDA in str(w.message)]
    assert len(said) == 1
    assert prof.trace_files  # the Kineto recording goes on unchanged


@pytest.mark.skipif(not CUDA, reason="NVTX ranges need CUDA")
def test_with_cuda_each_step_is_a_range(tmp_path):
    with trainprof.profile(output_trace_dir=tmp_path, nvtx=True, schedule_option={}) as prof:
        for _ in range(3):
            torch.ones(4, device="cuda").sum()
            prof.step()
        assert prof.nvtx.active
    assert prof.nvtx.ranges == 4  # ProfilerStep#0..#3: the one open at stop is closed there


def test_marks_off_by_default():
    marks = trainprof.profile().nvtx
    assert isinstance(marks, NvtxMarks) and not marks.active and marks.ranges == 0


def test_run_takes_nvtx_flags():
    args = parse_run_args(["--nvtx", "--nvtx-ops", "--", "train.py"])
    config = config_from_args(args)
    assert config.nvtx and config.nvtx_ops
    assert not config_from_args(parse_run_args(["--", "train.py"])).nvtx


def test_run_under_nsys_without_nsys_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys):
    from trainprof.commands.run import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys on this machine, nor here
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert main(["--nsys", "--out", str(tmp_path / "out"), "--", str(script)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs Nsight Systems' nsys" in err


def test_the_nsys_command_runs_this_run_with_marks_inside_nsys():
    from trainprof.commands.nsys_run import nsys_command

    argv = ["--nsys", "--out", "traces", "--record-shapes", "--", "train.py", "--nsys", "3"]
    command = nsys_command("/opt/nsys", parse_run_args(argv), argv)
    assert command[:7] == ["/opt/nsys", "profile", "--trace=cuda,nvtx,osrt", "--output",
                           "traces/nsys_report", "--force-overwrite=true", "--export=sqlite"]
    inner = command[command.index("run") + 1:]
    assert inner == ["--out", "traces", "--record-shapes", "--nvtx", "--activities", "cpu",
                     "--no-analysis", "--", "train.py", "--nsys", "3"]
