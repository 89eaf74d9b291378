"""The ``trainprof`` command freezes what is left out of the garbage collector before exiting
(a cheaper exit), except after ``trainprof run``, whose script's objects keep their finalizers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.paths import NCCL_TRACE

PROBE = ("import gc, sys\n"
         "from trainprof.cli import console_main\n"
         "sys.argv = ['trainprof', *sys.argv[1:]]\n"
         "code = console_main()\n"
         "print('frozen' if gc.get_freeze_count() else 'not frozen', code)\n")


def probe(*args: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          timeout=120, check=False)
    return done.stdout.strip().splitlines()[-1]


def test_an_analysis_exits_frozen_and_writes_its_result(tmp_path):
    out = tmp_path / "result.json"
    assert probe("analyze", str(NCCL_TRACE), "--format", "json", "-o", str(out)) == "frozen 0"
    assert out.stat().st_size > 1000


def test_a_script_run_exits_unfrozen(tmp_path):
    script = Path(tmp_path / "train.py")
    script.write_text("print('trained')\n")
    assert probe("run", "--no-analysis", "--out", str(tmp_path / "out"), "--", str(script)) == \
        "not frozen 0"
