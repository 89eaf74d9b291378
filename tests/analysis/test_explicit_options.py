"""The options of an analysis travel as arguments (issue 28): every path that computes
sections gets them, the result keeps them for the renderers, and the old context manager only
sets the defaults of ``trainprof.analyze``, with a ``DeprecationWarning``."""

from __future__ import annotations

import io
import json
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from rich.console import Console

import trainprof
from trainprof.analysis.options import AnalyzeOptions, analyze_options, using_options
from trainprof.analysis.overview.rank import analyze_trace
from trainprof.analysis.streaming.streamed import analyze_streamed
from trainprof.cli import main
from trainprof.hardware import load_hardware_file
from trainprof.report.json import to_json_bytes, write_json
from trainprof.report.markdown.report import to_markdown
from trainprof.report.terminal.report import print_analysis
from trainprof.trace.load import load_file

from helpers.paths import BERT, TRACE_FILTER

SRC = Path(trainprof.__file__).parent
DEVICE = {"name": "Options Test Accelerator", "peak_tflops": {"bf16": 123.0, "fp32": 12.0},
          "hbm_tb_s": 1.5}


def text_of(analysis, **given) -> str:
    console = Console(file=io.StringIO(), width=200, record=True)
    print_analysis(analysis, console, **given)
    return console.export_text()


def operator_rows(text: str) -> list[str]:
    """The op names of the text report's operator table: the lines under its rule, up to the
    call sites."""
    lines = [line.strip("│ ").rstrip() for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("Operators by"))
    rule = next(i for i in range(start, len(lines)) if lines[i].startswith("───"))
    rows = []
    for line in lines[rule + 1:]:
        if not line or not re.search(r"\s\d+\s+[\d.]+\s+[\d.]+", line):
            break
        rows.append(line.split()[0])
    return rows


def test_the_renderers_use_the_options_the_analysis_was_made_with():
    analysis = trainprof.analyze(BERT, top=3, modules=True)
    assert analysis.options.top == 3 and analysis.options.modules
    text = text_of(analysis)
    names = [r.name for r in analysis.ranks[0].sections.operators.rows]
    assert operator_rows(text) == names[:3]
    assert "Modules by kernel time" in text and "BertLayer_0" in text
    plain = text_of(trainprof.analyze(BERT))
    assert operator_rows(plain) == names[:10] and len(names) > 3
    assert "Modules by" not in plain
    # an explicit argument overrides the analysis's options
    assert operator_rows(text_of(analysis, top=5, modules=False)) == names[:5]
    markdown = to_markdown(analysis)
    assert "### Time per module" in markdown and "### Time per module" not in to_markdown(
        analysis, modules=False)


def test_the_options_are_not_in_the_json_result():
    with_options = json.loads(to_json_bytes(trainprof.analyze(BERT, top=3, modules=True)))
    assert with_options == json.loads(to_json_bytes(trainprof.analyze(BERT)))


def test_a_saved_result_is_rendered_with_the_options_of_the_command(tmp_path):
    saved = tmp_path / "bert.json"
    write_json(trainprof.analyze(BERT), saved)
    out = tmp_path / "bert.txt"
    assert main(["analyze", str(saved), "--top", "2", "--format", "text", "-o", str(out),
                 "--no-progress"]) == 0
    names = [r["name"] for r in json.loads(saved.read_text())["ranks"][0]["operators"]["rows"]]
    assert operator_rows(out.read_text()) == names[:2]


def test_analyses_at_the_same_time_each_get_their_own_options():
    asked = {"calls": AnalyzeOptions(sort_by="calls", top=2),
             "host": AnalyzeOptions(sort_by="host_total_us", by_shape=True, top=4)}
    start, got = threading.Barrier(len(asked)), {}

    def run(key: str) -> None:
        start.wait()
        for _ in range(3):
            got.setdefault(key, []).append(trainprof.analyze(BERT, options=asked[key]))

    threads = [threading.Thread(target=run, args=(key,)) for key in asked]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key, results in got.items():
        for a in results:
            ops = a.ranks[0].sections.operators
            assert a.options == asked[key]
            assert (ops.sort_by, ops.by_shape) == (asked[key].sort_by, asked[key].by_shape)
            assert len(operator_rows(text_of(a))) == asked[key].top
    by_calls = got["calls"][0].ranks[0].sections.operators.rows
    by_host = got["host"][0].ranks[0].sections.operators.rows
    assert [r.calls for r in by_calls] == sorted((r.calls for r in by_calls), reverse=True)
    assert [r.host_total_us for r in by_host] == sorted((r.host_total_us for r in by_host),
                                                        reverse=True)
    assert any(r.shape is not None for r in by_host)
    # the other result's order, as computed here from the first one's rows, differs
    host_order = [r.name for r in sorted(by_calls, key=lambda r: -r.host_total_us)]
    assert host_order != [r.name for r in by_calls]


def test_the_section_workers_and_the_streamed_path_get_the_options(tmp_path):
    hardware = load_hardware_file(_hardware_file(tmp_path))
    options = AnalyzeOptions(sort_by="calls", by_shape=True, hardware=hardware)
    trace = load_file(BERT, workers=1)
    forked = analyze_trace(trace, workers=2, options=options)
    serial = analyze_trace(trace, workers=1, options=options)
    streamed = analyze_streamed(BERT, max_memory=2**30, steps_per_window=1, options=options)
    for r in (forked, serial, streamed):
        assert (r.sections.operators.sort_by, r.sections.operators.by_shape) == ("calls", True)
        assert r.sections.roofline.device_source == "--hardware"
        assert r.sections.roofline.device.name == DEVICE["name"]
    assert to_json_bytes(forked.to_dict()) == to_json_bytes(serial.to_dict())
    default = analyze_trace(trace, workers=2)
    assert default.sections.roofline.device_source == "table"
    assert default.sections.operators.sort_by == "device_self_us"


@pytest.mark.parametrize("how", ["workers", "executor"])
def test_a_folder_analysed_elsewhere_gets_the_options(tmp_path, how):
    folder = tmp_path / "job"
    folder.mkdir()
    for file in sorted(TRACE_FILTER.glob("*.json.gz")):
        shutil.copy(file, folder / file.name)
    hardware = _hardware_file(tmp_path)
    if how == "workers":  # a worker process gets both files (pool.py sends two tasks ahead)
        analysis = trainprof.analyze(folder, workers=2, hardware=hardware, sort_by="calls")
    else:
        with ThreadPoolExecutor(2) as pool:
            analysis = trainprof.analyze(folder, executor=pool, hardware=hardware,
                                         sort_by="calls")
    assert len(analysis.ranks) == 2
    for r in analysis.to_dict()["ranks"]:
        assert r["roofline"]["device"]["name"] == DEVICE["name"]
        assert r["operators"]["sort_by"] == "calls"
    default = trainprof.analyze(folder, workers=1).to_dict()["ranks"]
    assert all(r["roofline"]["device"] is None or r["roofline"]["device"]["name"]
               != DEVICE["name"] for r in default)


def test_using_options_is_deprecated_and_sets_the_defaults_of_analyze():
    with pytest.warns(DeprecationWarning, match="using_options"):
        block = using_options(AnalyzeOptions(sort_by="calls", top=3))
    with block:
        inside = trainprof.analyze(BERT, by_shape=True)
        with pytest.warns(DeprecationWarning, match="analyze_options"):
            assert analyze_options().top == 3
    assert (inside.options.sort_by, inside.options.top, inside.options.by_shape) == (
        "calls", 3, True)
    assert inside.ranks[0].sections.operators.sort_by == "calls"
    assert len(operator_rows(text_of(inside))) == 3  # rendered after the block ended
    assert trainprof.analyze(BERT).options == AnalyzeOptions()


def test_no_module_reads_the_options_from_a_context():
    shims = SRC / "analysis" / "options.py"
    calls = re.compile(r"\b(analyze_options|using_options|table_options|using_table_options)\(")
    found = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py"))
             if path != shims
             for n, line in enumerate(path.read_text().splitlines(), 1) if calls.search(line)]
    assert found == []
    assert calls.search(shims.read_text())  # the test reads what it means to


def _hardware_file(tmp_path: Path) -> Path:
    path = tmp_path / "device.json"
    path.write_text(json.dumps(DEVICE))
    return path
