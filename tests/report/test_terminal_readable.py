"""The text report reads at 80 and 200 columns: C++ names shortened and never two rows alike,
no column left out unsaid, "1 step" not "1 steps", each Tensor Core share named with its
denominator, and the verdict first."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

import trainprof
from trainprof.report.names import distinct_names, short_name
from trainprof.report.terminal.report import print_analysis

from helpers.long_names import (
    fa3_backward,
    fa3_backward_postprocess,
    fa3_backward_preprocess,
    fa3_backward_trace,
)
from helpers.paths import BERT

FA3 = [fa3_backward(128), fa3_backward(64), fa3_backward_postprocess(128),
       fa3_backward_preprocess(128)]


@pytest.fixture(scope="module")
def fa3(tmp_path_factory):
    return trainprof.analyze(fa3_backward_trace().write(tmp_path_factory.mktemp("fa3") / "t.json"))


@pytest.fixture(scope="module")
def bert():
    return trainprof.analyze(BERT)


def rendered(analysis, width: int) -> list[str]:
    out = io.StringIO()
    print_analysis(analysis, Console(file=out, width=width, color_system=None))
    return [line.strip("│ ") for line in out.getvalue().splitlines()]


def table_rows(lines: list[str], header: str, count: int) -> list[list[str]]:
    """The ``count`` lines under the table header holding ``header`` (past its rule), split
    into cells on runs of two spaces or more."""
    start = next(i for i, line in enumerate(lines) if header in line)
    return [re.split(r"\s{2,}", line) for line in lines[start + 2:start + 2 + count]]


@pytest.mark.parametrize("width", [80, 200])
def test_fa3_rows_take_one_line_each_and_read_apart(fa3, width):
    lines = rendered(fa3, width)
    assert max(len(line) for line in lines) <= width
    # The what-if table: every column there, one line per item (on main: ~40 lines for one).
    header = next(line for line in lines if line.startswith("on the path"))
    for column in ("% of path", "step ms if 0", "if half", "saves ≤"):
        assert column in header
    # (The what-if lists three of the FA3 kernels, the all-reduce, and nothing after.)
    path = table_rows(lines, "% of path", 5)
    assert [row[0].split(":")[0] for row in path[:4]] == ["kernel"] * 3 + ["collective"], path
    assert all(len(row) == 5 for row in path[:4]), path  # the name and the four numbers
    assert all(row[0].startswith("kernel: FlashA") for row in path[:3]), path
    assert len({row[0] for row in path[:3]}) == 3  # three kernels, three different labels
    assert not path[4] or path[4] == [""] or "╰" in path[4][0] or path[4][0] == ""
    # The kernel table: the same four FA3 kernels, told apart, with all six number columns.
    kernels = [row for row in table_rows(lines, "total ms", 6) if row[0].startswith("FlashA")]
    assert len(kernels) == 4 and all(len(row) >= 6 for row in kernels), kernels
    assert len({row[0] for row in kernels}) == 4
    # The 128 and 64 head-dimension kernels carry the word that tells them apart.
    assert [row[0].endswith(("· 128", "· 64")) for row in kernels[:2]] == [True, True]


def test_short_name_leads_with_the_kernel_class():
    assert short_name(fa3_backward(128)) == (
        "FlashAttnBwdSm90<CollectiveMainloopBwdSm90<…>, CollectiveEpilogueBwd<…>, "
        "SingleTileScheduler<…>> in device_kernel")
    assert short_name(fa3_backward_preprocess(64)) == (
        "FlashAttnBwdPreprocess<tuple<C<64>, C<64>>, bfloat16_t, float, Sm90, false, false> "
        "in device_kernel")
    assert short_name(fa3_backward_postprocess(128)) == (
        "FlashAttnBwdPostprocessConvertdQ<tuple<…>, bfloat16_t, float, Sm90, 256, TiledMMA<…>, "
        "false, false, false> in device_kernel")
    # PyTorch's elementwise kernels keep the functor that tells them apart; the lambda and
    # the parameter lists go.
    mul = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
           "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
           "MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, "
           "float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)"
           "#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, "
           "float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
           "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
           "MulFunctor<float> > const&)::{lambda(int)#1})")
    assert short_name(mul) == ("elementwise_kernel<128, 2, gpu_kernel_impl_nocast<BinaryFunctor<"
                               "float, float, float, MulFunctor<float>>>>")
    # Names under the limit read whole, as before (tests/cli/test_terminal_width.py).
    assert short_name("void at::native::(anonymous namespace)::softmax_warp_forward<float, 8>"
                      "(float*)") == "softmax_warp_forward<float, 8>"


@pytest.mark.parametrize("width", [12, 20, 30, None])
def test_distinct_names_never_read_alike(width):
    names = [*FA3, fa3_backward(96), "volta_sgemm_64x64_nt"]
    shown = distinct_names(names, width)
    assert len(set(shown)) == len(names)
    assert width is None or all(len(s) <= width for s in shown)
    # Reference: the first word where the two main kernels' names differ is the head dim.
    words = [re.findall(r"[A-Za-z_]\w*|\d+", n) for n in (fa3_backward(128), fa3_backward(96))]
    at = next(i for i, (a, b) in enumerate(zip(*words, strict=False)) if a != b)
    assert (words[0][at], words[1][at]) == ("128", "96")
    if width != 12:  # from 20 columns on, the class names differ where the labels are cut
        assert shown[0].endswith("· 128") and shown[4].endswith("· 96")


def test_one_step_headings_say_step(bert):
    text = "\n".join(rendered(bert, 120))
    assert "Step time (1 step, from ProfilerStep)" in text
    assert not re.search(r"\b1 (steps|calls|ranks|windows)\b", text), \
        re.findall(r".*\b1 (?:steps|calls|ranks|windows)\b.*", text)


def test_each_tensor_core_share_names_its_denominator(fa3):
    text = " ".join(" ".join(rendered(fa3, 200)).split())
    # Per step: Tensor Core 850 µs of 880 µs of compute kernels, of 980 µs of all kernels.
    of_compute, of_all = 850 / 880 * 100, 850 / 980 * 100
    out = io.StringIO()
    print_analysis(fa3, Console(file=out, width=200, color_system=None))
    at = next(i for i, line in enumerate(out.getvalue().splitlines()) if "SM efficiency" in line)
    gpu = [c.strip() for c in out.getvalue().splitlines()[at + 2].split("│") if c.strip()]
    assert gpu[0] == "0" and gpu[-1] == f"{of_compute:.1f}%"
    assert "Tensor Core (of compute)" in text and "share of compute-kernel time" in text
    assert f"Tensor Core kernels {of_all:.1f}% of all kernel time" in text


def test_the_single_trace_report_opens_on_the_top_finding(bert):
    lines = rendered(bert, 80)
    assert "Findings, most costly first" in lines[0]
    top = bert.findings[0]
    assert lines[1].startswith(f"1. [{top.severity}]")
    assert top.title.split()[0] in lines[1]


def test_module_columns_left_out_at_80_are_named(builder, tmp_path):
    from helpers.module_workload import synthetic_gpu_modules

    synthetic_gpu_modules(builder)
    analysis = trainprof.analyze(builder.write(tmp_path / "t.json"), modules=True)
    narrow, wide = rendered(analysis, 80), rendered(analysis, 200)
    header = next(line for line in narrow if line.startswith("module"))
    assert "dev self" not in header and "host fwd" not in header
    assert any("Columns dev self and host fwd left out below 120 columns" in line
               for line in narrow)
    header = next(line for line in wide if line.startswith("module"))
    assert "dev self" in header and "host fwd" in header
    assert not any("left out below" in line for line in wide)


def test_the_html_tables_shorten_the_same_way_and_keep_the_whole_name(fa3):
    from trainprof.report.sections.critical_path import what_if_table
    from trainprof.report.sections.kernels import kernels_table

    sections = fa3.ranks[0].sections
    kernels = kernels_table(sections.kernels)
    cells = [row[0] for row in kernels.rows if row[0].text.startswith("FlashAttnBwd")]
    assert len(cells) == 4 and len({c.text for c in cells}) == 4
    assert {c.title for c in cells} == set(FA3)  # the whole name in the tooltip
    path = what_if_table(sections.critical_path)
    texts = [row[0].text for row in path.rows if row[0].text.startswith("kernel: Flash")]
    assert len(texts) == 3 and len(set(texts)) == 3 and all(len(t) < 150 for t in texts)
