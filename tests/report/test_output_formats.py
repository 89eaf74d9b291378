"""The output formats are one table (report/formats.py): the commands write through it, the
command line offers what it holds, and each renderer writes what the command writes."""

from __future__ import annotations

import pytest

import trainprof
from trainprof.cli import build_parser, main
from trainprof.report.formats import FORMATS, formats_of, write_result

from helpers.paths import BERT


def _choices(command: str) -> tuple[str, ...]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    fmt = next(a for a in sub.choices[command]._actions if a.dest == "format")
    return tuple(fmt.choices)


def test_the_command_line_offers_the_formats_of_the_table():
    assert _choices("analyze") == formats_of("analysis") == ("text", "json", "md", "html")
    assert _choices("compare") == formats_of("comparison") == ("text", "json", "md")


@pytest.fixture(scope="module")
def bert():
    return trainprof.analyze(BERT)


@pytest.mark.parametrize("fmt", formats_of("analysis"))
def test_each_analysis_renderer_writes_what_the_command_writes(fmt, bert, tmp_path):
    by_command, by_table = tmp_path / f"command.{fmt}", tmp_path / f"table.{fmt}"
    assert main(["analyze", str(BERT), "--format", fmt, "-o", str(by_command),
                 "--no-progress"]) == 0
    write_result("analysis", bert, fmt, by_table, 10)
    written = by_table.read_text()
    assert written == by_command.read_text()
    # and it is that format: an independent look at the bytes
    opening = {"json": "{", "md": "#", "html": "<!DOCTYPE html>", "text": ""}[fmt]
    assert written.lstrip().startswith(opening) and "bert" in written.lower() or fmt == "text"
    assert len(written) > 500


@pytest.mark.parametrize("fmt", formats_of("comparison"))
def test_each_comparison_renderer_writes_what_the_command_writes(fmt, tmp_path):
    from trainprof.commands.compare import compare

    by_command, by_table = tmp_path / f"command.{fmt}", tmp_path / f"table.{fmt}"
    assert main(["compare", str(BERT), str(BERT), "--format", fmt, "-o", str(by_command),
                 "--no-progress"]) == 0
    write_result("comparison", compare(BERT, BERT), fmt, by_table, 10)
    assert by_table.read_text() == by_command.read_text()


def test_a_format_a_result_has_no_renderer_for_is_a_value_error(bert, tmp_path):
    with pytest.raises(ValueError, match="a comparison is written as text, json, md, not 'html'"):
        write_result("comparison", bert, "html", tmp_path / "x.html", 10)
    assert not (tmp_path / "x.html").exists()
    assert set(FORMATS) == {"analysis", "comparison"}
