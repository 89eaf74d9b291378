"""The roofline section: kernel time per outermost modelled op, against the device's peaks."""

from __future__ import annotations

import csv

import pytest

from trainprof.analysis.overview.steps import find_steps
from trainprof.analysis.roofline.section import roofline_for
from trainprof.hardware.table import device_from_dict
from trainprof.trace.load import load_file

from helpers.paths import BERT, TIMESFORMER

BF16 = "c10::BFloat16"
H100 = {"name": "NVIDIA H100 80GB HBM3", "id": 0, "numSms": 132, "computeMajor": 9}


def _section(path, hardware=None):
    trace = load_file(path)
    return roofline_for(hardware)(trace, find_steps(trace))


def _linear_step(builder, t: float, kernel_us: float) -> None:
    """aten::linear [256, 1024] x [4096, 1024]^T, with aten::addmm inside it launching the
    kernel: the linear owns the time, the addmm is not counted again."""
    builder.step(t // 1000, t, 1000)
    outer = builder.op("aten::linear", t + 10, 100, args={
        "Input Dims": [[256, 1024], [4096, 1024], [4096]], "Input type": [BF16, BF16, BF16]})
    inner = builder.op("aten::addmm", t + 20, 80, args={
        "Input Dims": [[4096], [256, 1024], [1024, 4096], [], []],
        "Input type": [BF16, BF16, BF16, "Scalar", "Scalar"]})
    builder.launch(t + 30, 5, k_ts=t + 40, k_dur=kernel_us, name="sm90_xmma_gemm_bf16",
                   external_id=inner["args"]["External id"])
    assert outer  # the enclosing op


def test_synthetic_gemm_against_a_hand_computed_roofline(builder, tmp_path):
    for n in range(3):
        _linear_step(builder, n * 1000, 20.0)
    builder.metadata["deviceProperties"] = [H100]
    r = _section(builder.write(tmp_path / "t.json"))
    m, n, k = 256, 4096, 1024
    flops = 2 * m * n * k + m * n
    nbytes = (m * k + k * n + m * n + n) * 2
    assert r.device.name == "H100 SXM" and r.device_source == "table"
    (row,) = r.shapes
    assert (row.op, row.calls, row.time_us) == ("aten::linear", 3, 60.0)
    assert row.flops == 3 * flops and row.bytes == 3 * nbytes
    ideal = 3 * max(flops / 989.5e6, nbytes / 3.35e6)  # µs at 989.5 TFLOP/s, 3.35 TB/s
    assert row.roofline_us == pytest.approx(ideal)
    assert row.pct_of_roofline == pytest.approx(ideal / 60.0 * 100)
    assert row.lost_us == pytest.approx(60.0 - ideal)
    assert row.bound == ("compute" if flops / nbytes >= 989.5 / 3.35 else "memory")
    assert r.time_us == 60.0 and r.coverage_pct == 100.0


def test_unknown_device_gives_figures_without_a_roofline_and_hardware_fills_it(builder,
                                                                                tmp_path):
    _linear_step(builder, 0, 20.0)
    builder.metadata["deviceProperties"] = [{"id": 0, "name": "Mystery Accelerator 9000"}]
    path = builder.write(tmp_path / "t.json")
    r = _section(path)
    assert r.device is None and r.shapes[0].pct_of_roofline is None
    assert r.shapes[0].achieved_tflops == pytest.approx(r.shapes[0].flops / 20.0 / 1e6)
    assert "--hardware" in r.notes[0]
    mine = device_from_dict({"name": "Mystery", "peak_tflops": {"bf16": 100.0},
                             "hbm_tb_s": 1.0}, "test")
    r = _section(path, hardware=mine)
    assert r.device_source == "--hardware"
    row = r.shapes[0]
    assert row.roofline_us == pytest.approx(max(row.flops / 100e6, row.bytes / 1e6))


def _tracelens_gemms(csv_path):
    with open(csv_path, newline="") as f:
        return {(int(r["param: M"]), int(r["param: N"]), int(r["param: K"])): r
                for r in csv.DictReader(f)}


@pytest.mark.parametrize("trace", [BERT, TIMESFORMER], ids=["bert", "timesformer"])
def test_h100_gemms_agree_with_tracelens(trace):
    """Our GEMM rows (linear/addmm with bias) against TraceLens's GEMM.csv beside the trace:
    the same FLOPs per call and the same GPU time (kernels and the memsets cuBLAS adds)."""
    ref = _tracelens_gemms(trace.parent / (trace.name.removesuffix(".json.gz")
                                           + "_perf_report_csvs") / "GEMM.csv")
    r = _section(trace)
    checked = 0
    for row in r.shapes:
        if row.op not in ("aten::linear", "aten::addmm"):
            continue
        dims = dict(p.split("=") for p in row.shape.split())
        key = (int(dims["M"]), int(dims["N"]), int(dims["K"]))
        if key not in ref or "B" in dims:
            continue
        theirs = ref[key]
        assert row.flops / row.calls == pytest.approx(float(theirs["GFLOPS_first"]) * 1e9)
        assert row.time_us == pytest.approx(float(theirs["Kernel Time (µs)_sum"]), rel=1e-3)
        checked += 1
    assert checked >= 3


def test_bert_on_h100_is_far_from_its_roofline():
    """bert-small at batch 1 on an H100: every GEMM is memory-bound (M=141 rows) and runs at
    a few % of the roofline; the big vocabulary projection gets closest."""
    r = _section(BERT)
    assert r.device.name == "H100 SXM"
    assert r.coverage_pct > 90
    gemm = next(c for c in r.classes if c.op_class == "gemm")
    assert gemm.bound == "memory" and 5 < gemm.pct_of_roofline < 20
    vocab = next(s for s in r.shapes if "N=30522" in s.shape)
    assert vocab.achieved_tflops == pytest.approx(106.86, abs=0.05)  # TraceLens: 106.86
    assert vocab.pct_of_roofline == max(s.pct_of_roofline for s in r.shapes
                                        if s.op_class == "gemm")
    assert [c.lost_us for c in r.classes] == sorted((c.lost_us for c in r.classes),
                                                    reverse=True)


def test_timesformer_patch_convolution_against_tracelens():
    """TraceLens's CONV_fwd.csv: 29.595009024 GFLOP, 74.625 MB, 1297.914 µs. It reads the
    bias as absent (its test is ``len(Input Dims) == 3``, never true for aten::convolution's
    nine arguments); we count the recorded [768] bias: + one FLOP per output element and
    768 x 2 bytes."""
    r = _section(TIMESFORMER)
    (conv,) = [s for s in r.shapes if s.op_class == "conv_fwd"]
    out = 128 * 768 * 14 * 14
    assert conv.flops - out == 29_595_009_024
    assert conv.bytes - 768 * 2 == 74.625 * 2**20
    assert conv.time_us == pytest.approx(1297.914, abs=1e-3)
    assert conv.bound == "compute"
