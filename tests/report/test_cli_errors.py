"""What a new user sees when a report, compare or annotate command is given something wrong:
one line on stderr that names the problem, and exit 2 (the CLI run in-process: fast)."""

from __future__ import annotations

import pytest

from trainprof.cli import main

from conftest import COMPILED


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``trainprof *argv``, argparse's own exits included."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("argv", "says"), [
    (["report", str(COMPILED), "--top", "x"], "argument --top: 'x' is not a whole number"),
    (["report", str(COMPILED), "--top", "0"], "argument --top: must be at least 1"),
    (["compare", str(COMPILED), str(COMPILED), "--fail-if-slower", "nan"],
     "'nan' must be a percentage of 0 or more"),
    (["compare", str(COMPILED), str(COMPILED), "--fail-if-slower", "-5"],
     "'-5' must be a percentage of 0 or more"),
    (["compare", str(COMPILED)], "the following arguments are required: new"),
    (["annotate"], "the following arguments are required: trace"),
    (["reprot", str(COMPILED)], "invalid choice: 'reprot'"),
])
def test_usage_errors_are_one_line(capsys, argv, says):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err
    assert err.startswith("trainprof") and err.rstrip().endswith("for usage).")


def test_bare_command_lists_the_commands(capsys):
    code, _, err = run(capsys)
    assert code == 2
    for command in ("analyze", "report", "compare", "annotate"):
        assert command in err


@pytest.mark.parametrize("command", ["report", "annotate", "analyze"])
def test_writing_onto_a_folder_is_one_sentence(capsys, tmp_path, command):
    argv = [command, str(COMPILED), "-o", str(tmp_path)]
    if command == "analyze":
        argv += ["--format", "md"]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err == f"trainprof: Cannot write {tmp_path}: it is a folder; give a file name.\n"
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_percent_limit_accepts_a_percent_sign(capsys, tmp_path):
    code, _, err = run(capsys, "compare", str(COMPILED), str(COMPILED), "--fail-if-slower",
                       "5%", "--format", "json", "-o", str(tmp_path / "c.json"))
    assert code == 0 and "within the 5% limit" in err


def test_trainprof_outputs_that_are_not_inputs_say_what_they_are(capsys, tmp_path):
    comparison = tmp_path / "compare.json"
    assert run(capsys, "compare", str(COMPILED), str(COMPILED), "--format", "json", "-o",
               str(comparison))[0] == 0
    for argv in (["compare", str(comparison), str(COMPILED)],
                 ["report", str(comparison), "-o", str(tmp_path / "r.html")],
                 ["annotate", str(comparison)]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1
        assert "is trainprof output of schema 'trainprof.compare/1', not a trace" in err
    saved = tmp_path / "result.json"
    assert run(capsys, "analyze", str(COMPILED), "--format", "json", "-o", str(saved))[0] == 0
    code, _, err = run(capsys, "annotate", str(saved), "-o", str(tmp_path / "a.json.gz"))
    assert code == 2 and "saved trainprof result: annotate needs the trace file" in err
