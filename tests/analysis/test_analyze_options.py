"""``trainprof.analyze`` takes every option of ``trainprof analyze`` that changes the analysis,
as ``AnalyzeOptions`` or as arguments, and gives what the command line gives."""

from __future__ import annotations

import inspect
import json

import pytest

import trainprof
from trainprof.analysis.options import AnalyzeOptions, defaults_in_force
from trainprof.cli import build_parser, main
from trainprof.report.json import write_json
from trainprof.structs import field_names

from helpers.paths import BERT

#: The command's options that say where and how the result goes, not what is computed.
OUTPUT_OPTIONS = {"path", "format", "output", "no_progress", "record", "name", "db", "log_to"}
#: Command-line names whose API argument is named otherwise.
API_NAME = {"sort": "sort_by", "jobs": "workers", "scheduler": "executor",
            "scheduler_file": "executor", "scheduler_timeout": "executor"}


def _analyze_dests() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices["analyze"]
    return {a.dest for a in parser._actions if a.dest != "help"}


def test_every_option_of_the_command_is_an_argument_of_the_api():
    arguments = set(inspect.signature(trainprof.analyze).parameters)
    for dest in _analyze_dests() - OUTPUT_OPTIONS:
        assert API_NAME.get(dest, dest) in arguments, dest
    # and each of AnalyzeOptions' fields can be given alone
    assert set(field_names(AnalyzeOptions)) <= arguments


def test_the_options_given_hold_for_that_analysis_only(tmp_path):
    out = tmp_path / "cli.json"
    assert main(["analyze", str(BERT), "--sort", "calls", "--by-shape", "--format", "json",
                 "-o", str(out), "--no-progress"]) == 0
    cli = json.loads(out.read_text())["ranks"][0]["operators"]
    write_json(trainprof.analyze(BERT, sort_by="calls", by_shape=True), tmp_path / "api.json")
    api = json.loads((tmp_path / "api.json").read_text())["ranks"][0]
    assert api["operators"] == cli
    rows = api["operators"]["rows"]
    # independent reading: sorted by calls, largest first; grouped by shape (a name repeats)
    assert [r["calls"] for r in rows] == sorted((r["calls"] for r in rows), reverse=True)
    names = [r["name"] for r in rows]
    assert len(set(names)) < len(names)
    assert defaults_in_force() == AnalyzeOptions()  # nothing left in force
    plain = trainprof.analyze(BERT).to_dict()["ranks"][0]["operators"]["rows"]
    assert len({r["name"] for r in plain}) == len(plain)


def test_options_and_arguments_combine_the_arguments_winning():
    a = trainprof.analyze(BERT, options=AnalyzeOptions(sort_by="calls", by_shape=True),
                          by_shape=False)
    rows = a.to_dict()["ranks"][0]["operators"]["rows"]
    assert [r["calls"] for r in rows] == sorted((r["calls"] for r in rows), reverse=True)
    assert len({r["name"] for r in rows}) == len(rows)


@pytest.mark.parametrize("given, words", [
    ({"sort_by": "speed"}, "cannot sort operators by 'speed'"),
    ({"top": 0}, "top must be at least 1"),
    ({"max_memory": "lots"}, "positive size"),
])
def test_a_bad_option_is_a_value_error_in_one_sentence(given, words):
    with pytest.raises(ValueError, match=words):
        trainprof.analyze(BERT, **given)
