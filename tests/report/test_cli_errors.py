"""What a new user sees when a report, compare or annotate command is given something wrong:
one line on stderr that names the problem, and exit 2 (the CLI run in-process: fast)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from trainprof.cli import main

from helpers.paths import COMPILED


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


def test_an_unknown_option_points_to_its_command_help(capsys):
    code, _, err = run(capsys, "report", str(COMPILED), "--by-shape")
    assert code == 2
    assert err == ("trainprof report: unrecognized arguments: --by-shape (see 'trainprof report "
                   "--help' for usage).\n")


def test_the_output_file_name_chooses_the_format(capsys, tmp_path):
    result = tmp_path / "r.json"
    code, _, err = run(capsys, "analyze", str(COMPILED), "-o", str(result))
    assert code == 0, err
    assert json.loads(result.read_text())["schema"] == "trainprof.analysis/1"
    page = tmp_path / "r.md"
    assert run(capsys, "analyze", str(COMPILED), "-o", str(page))[0] == 0
    assert page.read_text().lstrip().startswith("#")
    code, _, err = run(capsys, "analyze", str(COMPILED), "--format", "md", "-o", str(result))
    assert code == 2 and "--format md does not match the output file" in err
    assert "'trainprof analyze --help'" in err


def test_an_output_ending_no_format_has_is_refused(capsys, tmp_path):
    """``-o out.xml`` wrote the text report into an .xml file: now one sentence, exit 2, no
    file; ``.json.gz`` is JSON (gzipped), and ``--format`` names the format of any ending."""
    xml = tmp_path / "out.xml"
    code, out, err = run(capsys, "analyze", str(COMPILED), "-o", str(xml))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"cannot tell which format to write to {xml}" in err and ".json" in err
    assert not xml.exists()
    code, _, err = run(capsys, "compare", str(COMPILED), str(COMPILED), "-o",
                       str(tmp_path / "c.html"))  # compare writes no HTML
    assert code == 2 and ".md" in err and ".html" not in err.split(":", 2)[-1]
    zipped = tmp_path / "r.json.gz"
    assert run(capsys, "analyze", str(COMPILED), "-o", str(zipped))[0] == 0
    assert json.loads(gzip.decompress(zipped.read_bytes()))["schema"] == "trainprof.analysis/1"
    assert run(capsys, "analyze", str(COMPILED), "--format", "text", "-o", str(xml))[0] == 0
    assert "Findings" in xml.read_text() or "Verdict" in xml.read_text()


@pytest.mark.parametrize(("argv", "says"), [
    (["run"], "trainprof run: name the training script"),
    (["run", "--active", "0", "--", "train.py"], "argument --active: must be at least 1"),
    (["run", "--wait", "-1", "--", "train.py"], "argument --wait: must be 0 or more"),
    (["checklist", "--demo", "--min-time", "-1"], "argument --min-time: '-1' must be a number"),
])
def test_command_line_errors_name_options_not_parameters(argv, says):
    """One sentence that names the option (never a Python parameter), and exit 2; `run` is
    its own parser, so these run as a user types them."""
    done = subprocess.run([sys.executable, "-m", "trainprof", *argv], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert "_s " not in done.stderr and "schedule_option" not in done.stderr


DROP_FILE_ACCESS = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search",
                    "--inh-caps", "-dac_override,-dac_read_search", "--"]


def _without_file_access(argv: list[str]) -> subprocess.CompletedProcess:
    """``trainprof argv`` as a user whose file permissions hold (root loses the capabilities
    that let it read any file)."""
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root, and no setpriv to drop the capability that ignores permissions")
        prefix = DROP_FILE_ACCESS
    else:
        prefix = []
    return subprocess.run([*prefix, sys.executable, "-m", "trainprof", *argv],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", ["analyze", "report", "compare", "annotate"])
def test_an_unreadable_file_is_one_sentence(tmp_path, command):
    trace = tmp_path / "rank0.json"
    shutil.copy(COMPILED, trace)
    trace.chmod(0)
    argv = {"compare": ["compare", str(trace), str(trace)],
            "report": ["report", str(trace), "-o", str(tmp_path / "r.html")],
            "annotate": ["annotate", str(trace), "-o", str(tmp_path / "a.json")]}.get(
        command, [command, str(trace)])
    done = _without_file_access(argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"trainprof: cannot access {trace}: permission denied.\n"


def test_an_unreadable_folder_says_so(tmp_path):
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copy(COMPILED, folder / "rank0.json")
    folder.chmod(0)
    try:
        done = _without_file_access(["analyze", str(folder)])
    finally:
        folder.chmod(0o755)
    assert done.returncode == 2
    assert done.stderr == f"trainprof: Cannot read the folder {folder}: permission denied.\n"
