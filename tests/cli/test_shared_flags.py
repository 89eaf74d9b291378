"""One flag for one idea across commands: every subcommand's --help is read and the shared
flags checked; --version, completion scripts and the documented exit codes."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

import trainprof
from trainprof.cli import build_parser, main
from trainprof.completion import commands

from helpers.paths import COMPILED, ROOT

#: Commands that print a result, and the formats each offers (text first, the default).
PRINTS_A_RESULT = {"analyze": {"text", "json", "md", "html"}, "compare": {"text", "json", "md"},
                   "memory": {"text", "json"}, "history": {"text", "json", "csv", "html"},
                   "bench": {"text", "json"}, "checklist": {"text", "json"},
                   "sql": {"text", "csv", "json"}}
WRITES_A_FILE = {"analyze", "report", "compare", "annotate", "memory", "history", "bench",
                 "checklist", "export", "sql"}
RECORDS = {"analyze"}  # and `run`, whose parser is its own (checked below)


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


@pytest.mark.parametrize("name", sorted(subparsers()))
def test_every_help_is_one_screen_that_exits_0(name, capsys):
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: trainprof {name}")
    assert all(len(line) <= 100 for line in text.splitlines()), text


def test_shared_flags_mean_one_thing_everywhere():
    subs = subparsers()
    for name, parser in subs.items():
        fmt, out = option(parser, "--format"), option(parser, "-o")
        if name in PRINTS_A_RESULT:
            assert fmt is not None and set(fmt.choices) == PRINTS_A_RESULT[name], name
            assert fmt.default == "text", name
        else:
            assert fmt is None, name
        if name in WRITES_A_FILE:
            assert out is not None and out.option_strings == ["-o", "--output"], name
        else:
            assert out is None, name
        db = option(parser, "--db")
        if name in RECORDS or name == "history":
            assert db is not None and "TRAINPROF_HISTORY_DB" in db.help, name
        if name in RECORDS:
            assert option(parser, "--record") is not None, name


def test_run_has_the_same_record_flags():
    from trainprof.cli_parser import OneLineParser
    from trainprof.cli_run import add_run_arguments

    parser = OneLineParser(prog="trainprof run")
    add_run_arguments(parser)
    analyze = subparsers()["analyze"]
    for flag in ("--record", "--db", "--name"):
        assert option(parser, flag).help == option(analyze, flag).help, flag
    assert option(parser, "-v") is not None


def test_version():
    done = subprocess.run([sys.executable, "-m", "trainprof", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"trainprof {trainprof.__version__}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_know_every_command_and_option(shell, capsys):
    assert main(["completion", shell]) == 0
    text = capsys.readouterr().out
    table = commands(build_parser())
    for name, options in table.items():
        assert not name or name in text
        for flag in options:
            assert (flag if shell != "fish" else flag.lstrip("-")) in text


def test_bash_completion_completes_in_a_real_bash(tmp_path):
    script = tmp_path / "c.bash"
    script.write_text(subprocess.run([sys.executable, "-m", "trainprof", "completion", "bash"],
                                     capture_output=True, text=True, check=True).stdout)
    probe = (f'source {script}; COMP_WORDS=(trainprof comp); COMP_CWORD=1; _trainprof; '
             'echo "${COMPREPLY[@]}"; COMP_WORDS=(trainprof analyze --for); COMP_CWORD=2; '
             '_trainprof; echo "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == ["compare completion", "--format"]


def test_analyze_writes_the_html_report(tmp_path, capsys):
    page = tmp_path / "r.html"
    assert main(["analyze", str(COMPILED), "-o", str(page)]) == 0
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html


def test_readme_names_the_exit_codes():
    readme = (ROOT / "README.md").read_text()
    codes = dict(re.findall(r"^\| `(\d)` \| (.+?) \|$", readme, re.MULTILINE))
    assert set(codes) == {"0", "1", "2", "3"}, codes
