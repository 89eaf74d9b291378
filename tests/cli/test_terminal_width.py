"""The text report reads in an 80- and a 120-column terminal: names give way, numbers never."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

import trainprof
from trainprof.report.terminal.report import print_analysis

from helpers.paths import RESNET_W0


@pytest.fixture(scope="module")
def resnet():
    return trainprof.analyze(RESNET_W0)


def rendered(analysis, width: int) -> list[str]:
    out = io.StringIO()
    print_analysis(analysis, Console(file=out, width=width, color_system=None))
    return out.getvalue().splitlines()


def row_after(lines: list[str], header: str, first_cell: str) -> list[str]:
    """The cells (split on runs of spaces) of the first row starting with ``first_cell`` after
    the table header line holding ``header``."""
    start = next(i for i, line in enumerate(lines) if header in line)
    for line in lines[start + 1:]:
        body = line.strip("│ ")
        if body.startswith(first_cell):
            return re.split(r"\s{2,}", body)
    raise AssertionError(f"no row {first_cell!r} under {header!r}")


@pytest.mark.parametrize("width", [80, 120])
def test_every_line_fits_and_numbers_stay_whole(resnet, width):
    lines = rendered(resnet, width)
    assert max(len(line) for line in lines) <= width
    # The longest idle gap: step 9, at 717.4 ms, 62,339 µs of host wait.
    assert row_after(lines, "gap µs", "9")[:4] == ["9", "717.4", "62339", "host wait"]
    # Operators: every number column is there, whole, in a narrow terminal too.
    op = row_after(lines, "dev tot", "aten::cudnn_convolution")
    assert op[-5:] == ["318", "22.80", "40.25", "142.46", "142.46"]
    # Kernels: the launching op is still shown, after the occupancy (wide) or under the
    # kernel's name (narrow), whole or cut with an ellipsis: never cropped at the panel's edge.
    kernel = row_after(lines, "launched by", "cudnn::")
    assert kernel[1:5] == ["162", "80.76", "498.5", "13.7%"]
    if width >= 110:
        assert kernel[-2] == "30%" and kernel[-1].startswith("aten::cudnn")
        launcher = kernel[-1]
    else:
        assert kernel[-1] == "30%"
        at = next(i for i, line in enumerate(lines) if line.strip("│ ").startswith(kernel[0]))
        launcher = lines[at + 1].strip("│ ")
    assert launcher == "aten::cudnn_convolution_backward_input" or (
        launcher.endswith("…") and launcher.startswith("aten::cudnn"))


def test_a_wide_terminal_shows_whole_names(resnet):
    lines = rendered(resnet, 200)
    assert max(len(line) for line in lines) <= 200
    assert any("cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>" in line
               for line in lines)


def test_shapes_are_read_whole_at_80_columns(tmp_path):
    analysis = trainprof.analyze(RESNET_W0, by_shape=True, top=3)
    lines = rendered(analysis, 80)
    assert max(len(line) for line in lines) <= 80
    start = next(i for i, line in enumerate(lines) if "per op name and input shapes" in line)
    block = " ".join(line.strip("│ ") for line in lines[start:start + 30])
    assert "[[32, 256, 56, 56], [32, 256, 56, 56], [256], [256], [256], [256], [256], [], [0]]" \
        in " ".join(block.split())


def test_findings_wrap_under_their_own_text(resnet):
    lines = rendered(resnet, 80)
    first = next(i for i, line in enumerate(lines) if "1. [high]" in line)
    text_column = lines[first].index("[high]")
    # The title's continuation line starts under the title, not under the number.
    continuation = lines[first + 1].strip("│")
    assert continuation[: text_column - 1].strip() == ""


def test_cpu_only_operator_table_has_no_device_columns(tmp_path, builder):
    builder.step(1, 0, 100)
    builder.op("aten::mm", 10, 60)
    lines = rendered(trainprof.analyze(builder.write(tmp_path / "cpu.json")), 100)
    header = next(line for line in lines if "host self" in line)
    assert "dev self" not in header and "dev tot" not in header
    assert row_after(lines, "host self", "aten::mm")[1:] == ["1", "0.06", "0.06"]


def test_short_kernel_names_lead_with_what_tells_them_apart():
    from trainprof.report.names import short_name as short_kernel_name

    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, "
            "at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, "
            "at::detail::Array<char*, 3>)")
    assert short_kernel_name(name) == ("vectorized_elementwise_kernel<4, AddFunctor<float>, "
                                       "at::detail::Array<char*, 3> >")
    assert short_kernel_name("void at::native::(anonymous namespace)::softmax_warp_forward"
                             "<float, 8>(float*)") == "softmax_warp_forward<float, 8>"
    assert short_kernel_name("volta_sgemm_64x64_nt") == "volta_sgemm_64x64_nt"


def test_rank_table_keeps_numbers_and_marks_whole_at_80_columns():
    """Five-digit step times and a rank marked both slowest and straggler: at 80 columns no
    number is cut and the marks are read whole (wrapped, not clipped with an ellipsis)."""
    from types import SimpleNamespace

    from trainprof.analysis.job.rank_table import RankRow, RankTable
    from trainprof.analysis.options import AnalyzeOptions
    from trainprof.report.terminal.report import ranks_table

    phases = {"data": 1234.5, "forward": 23456.0, "backward": 34567.0, "optimizer": 4567.0,
              "other": 123.0}
    rows = [RankRow(rank=r, windows=1, steps=3, step_ms=63948.0 + 1000 * r, phases_ms=phases,
                    comm_ms=12345.0, exposed_comm_ms=9876.0, idle_pct=12.0, idle_of="GPU",
                    mark={0: "fastest", 127: "slowest"}.get(r, "")) for r in (0, 1, 127)]
    table = RankTable(rows=rows, slowest=127, fastest=0)
    analysis = SimpleNamespace(job=SimpleNamespace(rank_table=table,
                                                   stragglers=SimpleNamespace(straggler=127)),
                               options=AnalyzeOptions())
    console = Console(file=io.StringIO(), width=80, record=True)
    console.print(ranks_table(analysis))
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    for number in ("63948", "64948", "190948", "23456", "34567", "12345", "9876"):
        assert number in text, number
    assert "marks: rank 0 fastest; rank 127 slowest straggler" in " ".join(text.split())
    wide = Console(file=io.StringIO(), width=140, record=True)
    wide.print(ranks_table(analysis))
    rows = {line.split()[0]: line for line in wide.export_text().splitlines()
            if line.strip() and line.split()[0] in ("0", "127")}
    assert rows["127"].rstrip().endswith("slowest straggler")
    assert rows["0"].rstrip().endswith("fastest") and "marks:" not in wide.export_text()
