"""The device table: every entry well-formed, names matched as traces write them, and
``--hardware FILE.json`` refused in one sentence when malformed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainprof.errors import HardwareError
from trainprof.hardware import DTYPES, device_for, load_devices, load_hardware_file

from helpers.paths import BERT, ROOT

REQUIRED = {"V100 SXM2", "V100 PCIe", "A100 40GB", "A100 80GB", "H100 SXM", "H100 PCIe",
            "H800 SXM", "H200 SXM", "B200", "L4", "L40S", "MI250X", "MI300X", "MI325X"}


def test_the_table_holds_every_device_the_issue_names_with_a_source():
    devices = load_devices()
    assert {d.name for d in devices} == REQUIRED
    for d in devices:
        assert d.sms and d.hbm_tb_s > 0 and d.link_gb_s and d.nic_gb_s
        assert d.source.startswith("https://"), d.name
        assert set(d.peak_tflops) == set(DTYPES)
        assert d.peak("bf16") or d.peak("fp16")


@pytest.mark.parametrize("name, entry", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H800", "H800 SXM"), ("NVIDIA H200", "H200 SXM"), ("NVIDIA B200", "B200"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"), ("Tesla V100-DGXS-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe"), ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB"), ("NVIDIA A100-PG509-200", "A100 40GB"),
    ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI250X", "MI250X"), ("AMD Instinct MI325X", "MI325X"),
])
def test_device_names_as_traces_write_them(name, entry):
    assert device_for(name).name == entry


def test_unknown_devices_match_nothing():
    assert device_for("NVIDIA GeForce RTX 3090") is None
    assert device_for("NVIDIA L40") is None  # not the L40S, not the L4


def test_ridge_point_is_peak_over_bandwidth():
    h100 = device_for("NVIDIA H100 80GB HBM3")
    assert h100.ridge("bf16") == pytest.approx(989.5 / 3.35)
    assert device_for("Tesla V100-SXM2-32GB").ridge("bf16") is None  # no bf16 on Volta


GOOD = {"name": "My NPU", "sms": 64, "peak_tflops": {"bf16": 400, "fp32": 50},
        "hbm_tb_s": 2.5, "link_gb_s": 200}


def test_a_hardware_file_reads_back(tmp_path):
    path = tmp_path / "npu.json"
    path.write_text(json.dumps(GOOD))
    d = load_hardware_file(path)
    assert (d.name, d.peak("bf16"), d.peak("fp8"), d.hbm_tb_s) == ("My NPU", 400.0, None, 2.5)


@pytest.mark.parametrize("content, words", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**GOOD, "hbm_tb_s": -1}), "hbm_tb_s"),
    (json.dumps({**GOOD, "peak_tflops": {"bf17": 3}}), "peak_tflops"),
    (json.dumps({**GOOD, "link_gb_s": "fast"}), "link_gb_s"),
    (json.dumps({"sms": 1}), "'name'"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply|not a JSON object"),
    (json.dumps({**GOOD, "hbm_tb_s": float("nan")}), "hbm_tb_s"),
    (json.dumps({**GOOD, "match": "h100"}), "'match'"),
])
def test_bad_hardware_files_are_one_sentence(tmp_path, content, words):
    path = tmp_path / "hw.json"
    path.write_text(content)
    with pytest.raises(HardwareError, match=words):
        load_hardware_file(path)


def test_cli_hardware_applies_and_a_bad_file_exits_2(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(GOOD))
    bad.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(BERT),
                           "--hardware", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "not valid JSON" in proc.stderr
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(BERT),
                           "--hardware", str(good), "--format", "json", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    roof = json.loads(out.read_text())["ranks"][0]["roofline"]
    assert roof["device"]["name"] == "My NPU" and roof["device_source"] == "--hardware"


def test_hardware_reaches_worker_processes(tmp_path):
    """A folder analysed in two processes: each rank uses the --hardware device."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"rank{rank}.pt.trace.json.gz").write_bytes(BERT.read_bytes())
    good, out = tmp_path / "good.json", tmp_path / "out.json"
    good.write_text(json.dumps(GOOD))
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(folder), "-j", "2",
                           "--hardware", str(good), "--format", "json", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    ranks = json.loads(out.read_text())["ranks"]
    assert len(ranks) == 2
    assert {r["roofline"]["device"]["name"] for r in ranks} == {"My NPU"}


def test_the_api_takes_the_hardware_file_or_device_as_the_cli_does(tmp_path):
    import trainprof

    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD))
    for hardware in (good, str(good), load_hardware_file(good)):
        roof = trainprof.analyze(BERT, hardware=hardware).to_dict()["ranks"][0]["roofline"]
        assert roof["device"]["name"] == "My NPU" and roof["device_source"] == "--hardware"
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(HardwareError, match="not valid JSON"):
        trainprof.analyze(BERT, hardware=bad)
