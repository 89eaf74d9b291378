"""`trainprof run`: an unmodified script, recorded; its argv, `__main__` and exit code kept."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

import pytest

from trainprof import cli_run
from trainprof.capture.safety import RecordingWarning
from trainprof.commands import run as runner

from capture_helpers import profiler_steps, read_trace, run_python, trace_names

# A training script with no profiler code at all; it reports what it saw, then exits with a code.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch

    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(int(sys.argv[1])):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with open("seen.json", "w") as f:
        json.dump({"argv": sys.argv, "name": __name__, "file": __file__}, f)
    if sys.argv[2] == "crash":
        raise ValueError("the script's own error")
    sys.exit(int(sys.argv[2]))
    """
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_script_runs_as_main_with_its_argv_and_exit_code(tmp_path, script):
    result = run_python(
        ["-m", "trainprof.commands.run", "--out", "traces", "--wait", "1", "--warmup", "1", "--active", "2",
         "--", "train.py", "6", "3", "--lr", "1e-3"],
        cwd=tmp_path,
    )
    assert result.returncode == 3, result.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == ["train.py", "6", "3", "--lr", "1e-3"]
    assert seen["name"] == "__main__"
    assert seen["file"].endswith("train.py")
    # steps are counted at optimizer.step(): wait 1, warm up 1, record steps 2 and 3
    assert trace_names(tmp_path / "traces") == ["rank0.step3.pt.trace.json.gz"]
    assert profiler_steps(read_trace(tmp_path / "traces" / "rank0.step3.pt.trace.json.gz")) == [2, 3]
    assert "Traceback" not in result.stderr
    assert "trainprof: 1 trace file(s) in traces" in result.stderr  # then the analysis is printed


def parse(argv):
    parser = argparse.ArgumentParser()
    cli_run.add_run_arguments(parser)
    return parser.parse_args(argv)


def test_a_crashing_script_exits_1_with_its_traceback_and_keeps_its_trace(tmp_path, script, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = parse(["--out", "traces", "--no-analysis", "--all-steps", "--", "train.py", "3", "crash"])
    assert runner.run_command(args) == 1
    err = capsys.readouterr().err
    assert "ValueError: the script's own error" in err
    assert 'File "' in err and "runpy" not in err  # the traceback starts in the script
    assert trace_names(tmp_path / "traces") == ["rank0.step3.pt.trace.json.gz"]


def test_sys_argv_and_path_are_restored_after_the_run(tmp_path, script, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, path = list(sys.argv), list(sys.path)
    with pytest.warns(RecordingWarning, match="no trace was written"):  # 1 step: too short
        assert runner.run_command(parse(["--out", "traces", "--no-analysis", "--", "train.py", "1", "0"])) == 0
    assert sys.argv == argv and sys.path == path


def test_a_missing_script_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert runner.run_command(parse(["--", "no_such_script.py"])) == 2
    assert capsys.readouterr().err.strip() == "trainprof run: no such script: no_such_script.py"


def test_options_map_to_the_profile_config():
    config = runner.config_from_args(parse(["--out", "x", "--active", "5", "--profile-memory",
                                            "--ranks", "0,2", "--activities", "cpu", "train.py"]))
    assert config.output_trace_dir == "x"
    assert config.schedule_option == {"skip_first": 0, "wait": 5, "warmup": 1, "active": 5, "repeat": 1}
    assert config.profile_memory and not config.record_shapes
    assert config.ranks == [0, 2] and config.activities == ["cpu"]
    assert runner.config_from_args(parse(["--all-steps", "train.py"])).schedule_option == {}


def test_nested_optimizer_steps_count_once(tmp_path, monkeypatch):
    (tmp_path / "nested.py").write_text(textwrap.dedent(
        """
        import torch

        class MySGD(torch.optim.SGD):  # step() calls super().step(): the hooks run twice, nested
            def step(self, closure=None):
                return super().step(closure)

        model = torch.nn.Linear(4, 1)
        optimizer = MySGD(model.parameters(), lr=0.1)
        for _ in range(4):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
        """
    ))
    monkeypatch.chdir(tmp_path)
    assert runner.run_command(parse(["--out", "t", "--no-analysis", "--all-steps", "--", "nested.py"])) == 0
    assert profiler_steps(read_trace(tmp_path / "t" / "rank0.step4.pt.trace.json.gz")) == [0, 1, 2, 3, 4]


def test_trainprof_command_dispatches_run(tmp_path, script):
    """`trainprof run` (not only `-m trainprof.commands.run`) takes its own options."""
    result = run_python(
        ["-m", "trainprof", "run", "--out", "traces", "--wait", "1", "--warmup", "1",
         "--active", "2", "--", "train.py", "6", "0"],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert trace_names(tmp_path / "traces") == ["rank0.step3.pt.trace.json.gz"]
    assert "Where the step time goes" in result.stdout  # the analysis printed at the end


# A script that profiles itself, warns, and reports its warning filters: `trainprof run` must
# leave all three as `python script.py` has them.
SELF_PROFILING = textwrap.dedent(
    """
    import json, warnings
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    warnings.warn("the script's own warning")
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=8)) as prof:
        for _ in range(8):
            model(torch.randn(8, 16)).sum().backward()
            optimizer.step()
            prof.step()
    names = {e.name for e in prof.events()}
    with open("seen.json", "w") as f:
        json.dump({"filters": [str(x) for x in warnings.filters], "addmm": "aten::addmm" in names}, f)
    """
)


def test_a_script_with_its_own_profiler_and_warnings_runs_as_without_trainprof(tmp_path):
    """Before: the script's profiler failed to start ("already enabled") and the process then
    crashed in the trace export; and the script's warnings were shown as trainprof's."""
    (tmp_path / "own.py").write_text(SELF_PROFILING)
    plain = run_python(["own.py"], cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    alone = json.loads((tmp_path / "seen.json").read_text())
    result = run_python(["-m", "trainprof", "run", "--out", "traces", "--wait", "1", "--warmup", "1",
                         "--active", "2", "--", "own.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == alone and seen["addmm"]  # its trace is whole, its filters are Python's
    assert "own.py:6: UserWarning: the script's own warning" in result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("trainprof:")]
    assert "trainprof: another torch profiler started; trainprof stopped recording" in ours[0]
    assert not any("warning: trainprof" in line for line in result.stderr.splitlines())


def test_the_capture_layer_says_which_trace_files_a_run_wrote(tmp_path):
    import os

    from trainprof.capture.writer import trace_file_name, traces_written_since

    began = 1_700_000_000.0
    for rank, step, age in ((0, 3, 0), (1, 3, 0), (0, 1, 5)):  # the last: an older run's file
        path = tmp_path / trace_file_name(rank, step)
        path.write_bytes(b"{}")
        os.utime(path, (began - age, began - age))
    (tmp_path / "notes.json.gz").write_bytes(b"{}")  # not a trace file of the writer
    (tmp_path / "rank2.step3.pt.trace.json.gz.tmp").write_bytes(b"{}")  # half written
    assert traces_written_since(tmp_path, began) == [
        (0, tmp_path / "rank0.step3.pt.trace.json.gz"),
        (1, tmp_path / "rank1.step3.pt.trace.json.gz")]
    assert traces_written_since(tmp_path / "missing", began) == []
