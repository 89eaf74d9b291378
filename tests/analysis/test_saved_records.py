"""A saved result reads back into the same typed records (analysis/decode.py): on every shared
trace, each part of the JSON written again from the records read back equals the JSON read."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

import trainprof
from trainprof.analysis.decode import analysis_from_dict, rank_from_dict, record
from trainprof.analysis.results import Analysis
from trainprof.analysis.section_results import JobSections, RankSections
from trainprof.analysis.sections.idle import IdleTime
from trainprof.errors import TraceError
from trainprof.report.formats import FORMATS
from trainprof.report.json import to_json_bytes, write_json
from trainprof.report.saved import saved_analysis

from helpers.model_parallel_traces import expert_parallel, tensor_parallel
from helpers.paths import NSYS_EXPORTS, SHARED_TRACE_FILES, TRACE_FILTER
from helpers.round_trip import differences

RESULT_SCRIPT = '<script type="application/json" id="trainprof-result">'
INPUTS = [*SHARED_TRACE_FILES, *NSYS_EXPORTS, TRACE_FILTER]


@cache
def _analysis(path: Path) -> Analysis:
    return trainprof.analyze(path, workers=1)


@cache
def _saved(path: Path) -> dict:
    return json.loads(to_json_bytes(_analysis(path)))


def _part(data: dict, where: str, name: str) -> list[dict]:
    if where == "job":
        return [data["job"][name]] if data["job"].get(name) is not None else []
    return [r[name] for r in data["ranks"] if r.get(name) is not None]


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: Path(p).name[:40])
def test_every_section_reads_back_the_same(path: Path) -> None:
    data = _saved(path)
    again = json.loads(to_json_bytes(analysis_from_dict(data)))
    problems = []
    for where, container in (("rank", RankSections), ("job", JobSections)):
        for name in container.field_names():
            for before, after in zip(_part(data, where, name), _part(again, where, name),
                                     strict=True):
                problems += differences(before, after, f"{where}.{name}")[:3]
    assert not problems, problems
    assert not differences(data, again)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: Path(p).name[:40])
def test_a_saved_result_renders_as_the_analysis_did(tmp_path: Path, path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every format written from the saved JSON (``trainprof analyze result.json``) is the
    very file written from the analysis itself."""
    monkeypatch.setenv("COLUMNS", "120")
    saved = tmp_path / "result.json"
    write_json(_analysis(path), saved)
    again = saved_analysis(saved)
    for name in ("text", "md", "html", "json"):
        render = FORMATS["analysis"][name]
        render(_analysis(path), tmp_path / f"fresh.{name}", 25)
        render(again, tmp_path / f"saved.{name}", 25)
        fresh = (tmp_path / f"fresh.{name}").read_text()
        saved = (tmp_path / f"saved.{name}").read_text()
        # A figure derived again from the saved (12-digit) fields may differ in its last digit:
        # the JSON, and the page's copy of it, are compared as values (floats to 1e-9).
        if name == "json":
            assert not differences(json.loads(fresh), json.loads(saved))
        elif name == "html":
            (page, data), (page_again, data_again) = _page(fresh), _page(saved)
            assert page == page_again
            assert not differences(data, data_again)
        else:
            assert _same_text(fresh, saved), name


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _same_text(a: str, b: str) -> bool:
    """The same text, a shown number allowed to differ by one unit of its last digit (a value
    read back from 12 digits can fall on the other side of a rounding boundary: 127.85)."""
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        if x != y:
            places = len(x.split(".")[1]) if "." in x else 0
            if abs(float(x.replace(",", "")) - float(y.replace(",", ""))) > 1.01 * 10**-places:
                return False
    return True


def _page(html: str) -> tuple[str, dict]:
    """The page without its embedded result, and the result."""
    head, rest = html.split(RESULT_SCRIPT, 1)
    data, tail = rest.split("</script>", 1)
    page = re.sub(r'data-v="([^"]+)"', _sort_key, head + tail)  # sort keys: full precision
    return page, json.loads(data)


def _sort_key(found: re.Match) -> str:
    try:
        return f'data-v="{float(found.group(1)):.9g}"'
    except ValueError:
        return found.group(0)


@pytest.mark.parametrize("job", ["tensor", "expert"])
def test_model_parallel_results_read_back_the_same(tmp_path: Path, job: str) -> None:
    if job == "tensor":
        tensor_parallel(300.0, 400.0).b.write(tmp_path / "rank0.json")
    else:
        for i, rank in enumerate(expert_parallel([1.0, 3.0])):
            rank.builder.write(tmp_path / f"rank{i}.json")
    data = json.loads(to_json_bytes(trainprof.analyze(tmp_path, workers=1)))
    assert not differences(data, json.loads(to_json_bytes(analysis_from_dict(data))))


def test_a_section_that_does_not_read_is_left_out_with_a_note() -> None:
    data = _saved(INPUTS[0])
    rank = rank_from_dict({**data["ranks"][0], "idle": {"devices": "three"}})
    assert rank.sections.idle is None and rank.sections.kernels is not None
    assert any(n.startswith("The saved result's rank 0: idle does not read as IdleTime")
               for n in rank.notes), rank.notes
    with pytest.raises(TraceError, match="does not read as IdleTime"):
        record({"devices": "three"}, IdleTime, "idle")
