"""`trainprof analyze --sort/--top/--by-shape`, and the deep sections in its JSON and text."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers.paths import ROOT


def run(*args: str):
    return subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True,
                          text=True, cwd=ROOT, env={"COLUMNS": "100", "PATH": ""})


def trace(builder, tmp_path):
    builder.step(1, 0, 1000)
    for i, name in enumerate(("aten::mm", "aten::add", "aten::relu")):
        op = builder.op(name, 100 * i, 50 + i, args={"Input Dims": [[i + 1, 2]]})
        builder.launch(100 * i + 5, 5, name=f"kernel_{name[6:]}", k_ts=100 * i + 20,
                       k_dur=10 * (3 - i), external_id=op["args"]["External id"])
    builder.event("cuda_runtime", "cudaDeviceSynchronize", 900, 50)
    return builder.write(tmp_path / "t.json")


def test_json_has_the_four_sections(builder, tmp_path):
    proc = run("analyze", str(trace(builder, tmp_path)), "--format", "json", "--by-shape",
               "--sort", "calls")
    assert proc.returncode == 0, proc.stderr
    rank = json.loads(proc.stdout)["ranks"][0]
    ops = rank["operators"]
    assert (ops["by_shape"], ops["sort_by"]) == (True, "calls")
    # One call each: ties go by name (add, mm, relu).
    assert [r["shape"] for r in ops["rows"]] == ["[[2, 2]]", "[[1, 2]]", "[[3, 2]]"]
    assert [r["name"] for r in rank["kernels"]["rows"]] == ["kernel_mm", "kernel_add",
                                                            "kernel_relu"]
    assert rank["launch"]["launches"] == 3
    assert rank["syncs"]["count"] == 1


def test_text_sorts_and_cuts(builder, tmp_path):
    proc = run("analyze", str(trace(builder, tmp_path)), "--sort", "host_total_us", "--top", "1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Operators by host total time" in out
    assert "aten::relu" in out and "aten::mm " not in out.split("Operators by")[1].split(
        "Kernels by")[0]
    assert max(len(line) for line in out.splitlines()) <= 100


def test_bad_options_are_one_clear_line(tmp_path):
    proc = run("analyze", str(tmp_path), "--sort", "speed")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = run("analyze", str(tmp_path), "--top", "0")
    assert proc.returncode == 2 and "at least 1" in proc.stderr
