"""A renamed or misspelled step statistic or section is a type error (issue 17): mypy, run on a
small snippet against the package's own types, reports it, and accepts the right spellings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[1]

SNIPPET = """
from trainprof.analysis.results import Analysis, RankAnalysis


def figures(r: RankAnalysis, a: Analysis) -> None:
    r.steps.median_ms
    r.steps.mediam_ms
    r.sections.kernels
    r.sections.kernel
    a.job.stragglers
    a.job.straggler
    r.steps["median_ms"]
    for p in r.steps.per_step:
        p["ms"]
        p["msec"]
"""


def _mypy(snippet: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "snippet.py"
    path.write_text(snippet)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MYPYPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--config-file", str(ROOT / "pyproject.toml"), str(path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_misspelled_keys_and_attributes_fail_the_type_check(tmp_path):
    done = _mypy(SNIPPET, tmp_path)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    lines = {int(line.split(":")[1]) for line in errors}
    # Only the misspelled lines (7, 9, 11, 12, 15 of the snippet): the right ones pass.
    assert lines == {7, 9, 11, 12, 15}, done.stdout + done.stderr
    assert any('"StepStats" has no attribute "mediam_ms"' in e for e in errors)
    assert any('"RankSections" has no attribute "kernel"' in e for e in errors)
    assert any('"JobSections" has no attribute "straggler"' in e for e in errors)
    assert any('"StepStats" is not indexable' in e for e in errors)
    assert any('"msec"' in e for e in errors)
