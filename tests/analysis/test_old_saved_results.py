"""Results saved by earlier trainprof versions (tests/data/saved/README.md) still load: every
command that takes a saved result reads them, their figures are the file's own, and a section
whose shape has changed since is left out with a note that names it, never read wrong."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from trainprof.report.saved import saved_analysis

from helpers.paths import BERT, ROOT

SAVED = ROOT / "tests" / "data" / "saved"
OLD = sorted(SAVED.glob("*.json.gz"))


def _unpacked(path: Path, folder: Path) -> Path:
    out = folder / path.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True,
                          text=True, cwd=ROOT)


@pytest.mark.parametrize("old", OLD, ids=lambda p: p.name)
def test_an_old_result_reads_with_its_own_figures(tmp_path: Path, old: Path) -> None:
    path = _unpacked(old, tmp_path)
    data = json.loads(path.read_text())
    analysis = saved_analysis(path)
    assert [r.rank for r in analysis.ranks] == [r["rank"] for r in data["ranks"]]
    for rank, saved in zip(analysis.ranks, data["ranks"], strict=True):
        assert rank.steps.median_ms == saved["steps"]["median_ms"]
        assert rank.steps.count == saved["steps"]["count"]
        assert rank.breakdown_pct == saved["breakdown_pct"]
        kernels = rank.sections.kernels
        assert kernels is not None
        assert [k.name for k in kernels.rows] == [k["name"] for k in saved["kernels"]["rows"]]
        assert [k.total_us for k in kernels.rows] == [k["total_us"] for k in saved["kernels"]["rows"]]
        read = set(rank.sections.names())
        left_out = [n for n in saved if n in type(rank.sections).field_names() and n not in read]
        for name in left_out:  # each one named in a note, never silently dropped
            assert any(f": {name} does not read as" in note for note in rank.notes), (name, rank.notes)
    assert [f.id for f in analysis.findings] == [f["id"] for f in data["findings"]]


@pytest.mark.parametrize("old", OLD, ids=lambda p: p.name)
def test_every_command_takes_an_old_result(tmp_path: Path, old: Path) -> None:
    path = _unpacked(old, tmp_path)
    data = json.loads(path.read_text())
    median = max(r["steps"]["median_ms"] for r in data["ranks"])
    md = _run("analyze", str(path), "--format", "md", "--no-progress")
    assert md.returncode == 0, md.stderr
    shown = re.search(r"\| median step \| ([\d,.]+) ms", md.stdout)
    assert shown and float(shown.group(1).replace(",", "")) == pytest.approx(median, abs=0.051)
    html = _run("report", str(path), "-o", str(tmp_path / "r.html"), "--no-progress")
    assert html.returncode == 0, html.stderr
    compare = _run("compare", str(path), str(BERT), "--format", "json", "--no-progress")
    assert compare.returncode == 0, compare.stderr
    base = json.loads(compare.stdout)["base"]
    every_step = [s["ms"] for r in data["ranks"] for s in r["steps"]["per_step"]]
    assert base["steps"] == len(every_step)
    assert base["median_step_ms"] == pytest.approx(statistics.median(every_step))


DAMAGES = {
    "ranks not a list": lambda d: {**d, "ranks": "x"},
    "a rank not an object": lambda d: {**d, "ranks": [1]},
    "a breakdown as a list": lambda d: {**d, "ranks": [{**d["ranks"][0],
                                                        "breakdown_pct": [1, 2]}]},
    "a median step as text": lambda d: {**d, "ranks": [{**d["ranks"][0],
                                                        "steps": {"median_ms": "fast"}}]},
    "the job as text": lambda d: {**d, "job": "x"},
    "a finding without its severity": lambda d: {**d, "findings": [{"id": "host_bound"}]},
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_result_is_one_sentence(tmp_path: Path, damage: str) -> None:
    data = json.loads(_unpacked(OLD[0], tmp_path).read_text())
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(DAMAGES[damage](data)))
    for args in (("analyze", str(path), "--format", "md"),
                 ("report", str(path), "-o", str(tmp_path / "r.html"))):
        proc = _run(*args, "--no-progress")
        assert proc.returncode == 2, (damage, args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("trainprof: "), (damage, proc.stderr)
        assert "does not read" in lines[0] and "internal error" not in lines[0]
