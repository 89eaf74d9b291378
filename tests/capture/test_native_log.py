"""The profiler's own log lines stay out of the terminal; everything else written to stderr
(errors above all) comes through, in order."""

from __future__ import annotations

import os
import subprocess
import sys

from trainprof.capture.native_log import QuietStderr, without_chatter

USDT = b"USDT:2026-11-24 23:49:48 10376:10376 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
STAGE = b"STAGE:2026-11-24 23:49:50 10380:10380 SyncActivityProfilerHandler.cpp:51] Completed Stage: Warm Up\n"
C10 = (b"[W1124 23:49:48.880370037 CPUAllocator.cpp:245] Memory block of unknown size was "
       b"allocated before the profiling started, profiler results will not include the "
       b"deallocation event\n")
ERROR = b"ERROR:2026-11-24 23:49:48 1:1 CuptiActivityApi.cpp:10] CUPTI initialisation failed\n"


def test_only_known_chatter_is_dropped():
    mixed = USDT + b"epoch 1 loss 0.5\n" + STAGE + C10 + ERROR + b"[W1124 other.cpp:1] keep\n"
    assert without_chatter(mixed) == b"epoch 1 loss 0.5\n" + ERROR + b"[W1124 other.cpp:1] keep\n"


def test_the_filter_replays_what_is_not_chatter(capfd, monkeypatch):
    monkeypatch.delenv("TRAINPROF_VERBOSE", raising=False)
    quiet = QuietStderr()
    for _ in range(2):  # reused, as across steps
        with quiet.around():
            os.write(2, USDT + b"a real problem\n" + C10 + b"and another\n")
    quiet.close()
    assert capfd.readouterr().err == "a real problem\nand another\n" * 2


def test_verbose_shows_everything(capfd, monkeypatch):
    monkeypatch.setenv("TRAINPROF_VERBOSE", "1")
    with QuietStderr().around():
        os.write(2, USDT)
    assert capfd.readouterr().err == USDT.decode()


def test_the_demo_prints_no_profiler_chatter_unless_asked(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINPROF_VERBOSE",
                                                            "TORCH_CPP_LOG_LEVEL")}
    runs = {}
    for flag in ([], ["-v"]):
        done = subprocess.run([sys.executable, "-m", "trainprof", "demo", "--steps", "4",
                               "--out", str(tmp_path / f"out{len(flag)}"), *flag],
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        runs[bool(flag)] = done.stdout + done.stderr
    assert "USDT:" not in runs[False] and "CPUAllocator" not in runs[False]
    assert "Traces in" in runs[False]
    assert "profiler_start" in runs[True]  # -v: the profiler's own lines, as torch prints them
