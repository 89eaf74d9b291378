"""`trainprof bench` and `trainprof checklist`: workloads by name, JSON out, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from trainprof.cli import main

from bench_helpers import one_thread  # noqa: F401 (an autouse fixture)

WORKLOAD = textwrap.dedent(
    """
    import torch
    from torch import nn
    from trainprof.bench import Workload

    def make_model():
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def make_batch():
        return torch.randn(8, 16), torch.randint(0, 4, (8,))

    def workload():
        return Workload(make_model=make_model, make_batch=make_batch,
                        loss_fn=nn.CrossEntropyLoss())

    not_a_workload = 42
    """
)


@pytest.fixture
def workload_file(tmp_path):
    path = tmp_path / "bench_cli_job.py"
    path.write_text(WORKLOAD)
    return path


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_bench_json_from_a_workload_file(workload_file, tmp_path, capsys):
    out_file = tmp_path / "bench.json"
    code, out, err = run_cli(
        ["bench", f"{workload_file}:workload", "--strategies", "fp32,batch2x,pinned",
         "--steps", "3", "--warmup", "1", "--repeats", "2", "--device", "cpu",
         "--format", "json", "-o", str(out_file)], capsys)
    assert code == 0, err
    assert out == ""
    data = json.loads(out_file.read_text())
    names = [row["name"] for row in data["strategies"]]
    assert names == ["fp32", "batch2x", "pinned"]
    for row in data["strategies"]:
        assert {"name", "samples_per_s", "step_ms", "peak_memory_bytes", "relative_to_baseline",
                "skipped", "reason", "samples_per_s_std"} <= set(row)
    assert data["strategies"][2]["skipped"] and "GPU" in data["strategies"][2]["reason"]
    assert data["strategies"][1]["samples_per_step"] == 16


@pytest.mark.slow
def test_checklist_demo_flags_the_slow_decoder(capsys):
    code, out, err = run_cli(["checklist", "--demo", "--device", "cpu", "--min-time", "0.05",
                              "--format", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data["phases_pct"]) == {"data", "forward", "backward", "optimizer"}
    assert "data" in data["flagged"]
    assert data["phases"][0]["rule"] == "data_loading"


@pytest.mark.slow
def test_bench_demo_text(capsys, tmp_path):
    out_file = tmp_path / "bench.txt"
    code, _, err = run_cli(["bench", "--demo", "--strategies", "fp32,fp16", "--steps", "2",
                            "--warmup", "1", "--repeats", "1", "-o", str(out_file)], capsys)
    assert code == 0, err
    text = out_file.read_text()
    assert "fp32" in text and "skipped fp16" in text and "samples/s" in text


@pytest.mark.parametrize(("args", "message"), [
    (["bench", "--demo", "--strategies", "fp32,warp-drive"], "unknown strategy 'warp-drive'"),
    (["bench"], "give a workload"),
    (["checklist", "--demo", "x.py:w"], "not both"),
    (["bench", "no_such_file.py:workload"], "no such file: no_such_file.py"),
    (["bench", "json:loads"], "calling json:loads failed (TypeError"),
    (["bench", "json:__name__"], "is not a trainprof.bench.Workload (it is a str)"),
    (["bench", "trainprof_no_such_module:w"], "cannot import trainprof_no_such_module"),
    (["bench", "--demo", "--device", "cuda"], "no CUDA GPU"),
    (["bench", "--demo", "--timeout", "3"], "--timeout needs --isolate"),
])
def test_bad_input_exits_2_with_one_line(args, message, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("trainprof: ") and message in err, err
    assert out == ""


@pytest.mark.parametrize(("args", "message"), [
    (["bench", "--demo", "--isolate", "--timeout", "0"],
     "trainprof bench: argument --timeout: '0' must be a number above 0"),
    (["checklist", "--demo", "--min-time", "0"],
     "trainprof checklist: argument --min-time: '0' must be a number above 0"),
])
def test_bad_numbers_are_usage_errors_that_name_the_option(args, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and err.startswith(message), err


def test_a_name_that_is_not_a_workload(workload_file, capsys):
    code, _, err = run_cli(["checklist", f"{workload_file}:not_a_workload"], capsys)
    assert code == 2 and "not a trainprof.bench.Workload (it is a int)" in err


def test_argument_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--demo", "--steps", "0"])
    assert exit_info.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_the_parser_does_not_import_torch():
    code = ("import sys; from trainprof.cli import build_parser; "
            "build_parser().parse_args(['bench', '--demo']); "
            "build_parser().parse_args(['checklist', '--demo']); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_bench_shows_its_progress_on_a_terminal(tmp_path):
    """In a terminal, a benchmark is never silent: a bar names the strategy that runs, how many
    are done and the time so far, and goes away before the results print."""
    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "trainprof", "bench", "--demo", "--strategies",
                                           "fp32,bf16", "--steps", "3", "--warmup", "1",
                                           "--repeats", "1"],
                          cwd=str(tmp_path), env={**os.environ, "COLUMNS": "120"},
                          encoding="utf-8", timeout=300, dimensions=(40, 120))
    child.expect(r"trainprof bench: (fp32|bf16).*\d/[23]")
    seen = child.after
    child.expect(pexpect.EOF)
    screen = child.before
    child.close()
    assert child.exitstatus == 0
    assert "trainprof bench:" in seen and "0:00:" in seen + screen
    assert "fp32" in screen and "bf16" in screen  # the results table
