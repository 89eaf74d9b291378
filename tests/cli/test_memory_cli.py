"""`trainprof memory SNAPSHOT`: text and JSON, refused pickles, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from trainprof.cli import main

from helpers.paths import ROOT
from helpers.snapshotgen import TORCH_LINEAR, MiB, SnapshotBuilder, frames


def oom_snapshot() -> dict:
    """An out-of-memory error from fragmentation: 12 MiB asked, 2 MiB free outside the cache and
    12 MiB in the cache, but in two blocks of 6 MiB."""
    b = SnapshotBuilder()
    train = frames(TORCH_LINEAR, ("/job/train.py", 42, "train_step"))
    b.segment([(8 * MiB, "active_allocated", train), (6 * MiB, "inactive"),
               (4 * MiB, "active_allocated", train), (6 * MiB, "inactive")])
    b.trace("alloc", 8 * MiB, time_us=10, frames=train)
    b.trace("alloc", 4 * MiB, time_us=20, frames=train)
    b.trace("oom", 12 * MiB, time_us=30, device_free=2 * MiB)
    return b.snapshot()


def write(path, data) -> str:
    path.write_bytes(pickle.dumps(data))
    return str(path)


def test_text_report_names_the_cause_the_site_and_the_fix(tmp_path, capsys):
    assert main(["memory", write(tmp_path / "oom.pickle", oom_snapshot())]) == 0
    out = " ".join(capsys.readouterr().out.split())  # as read, whatever the terminal's width
    assert "Out of memory on cuda:0: 12.58 MB requested; largest free block 6.29 MB" in out
    assert "fragmentation: enough memory was free in total" in out
    assert "/job/train.py:42 in train_step" in out
    assert "expandable_segments:True" in out and "max_split_size_mb" in out
    assert "docs/rules.md#memory-fragmentation" in out


def test_json_report(tmp_path, capsys):
    path = write(tmp_path / "oom.pickle", oom_snapshot())
    out_file = tmp_path / "memory.json"
    assert main(["memory", path, "--format", "json", "-o", str(out_file)]) == 0
    data = json.loads(out_file.read_text())
    assert data["schema"] == "trainprof.memory_snapshot/1"
    (snap,) = data["snapshots"]
    assert snap["source"] == path
    assert snap["devices"][0]["inactive_split"] == 12 * MiB
    assert snap["ooms"] == [{"device": 0, "requested": 12 * MiB, "device_free": 2 * MiB,
                             "cached_free": 12 * MiB, "largest_free_block": 6 * MiB,
                             "cause": "fragmentation"}]
    assert [f["id"] for f in snap["findings"]] == ["memory_fragmentation"]
    assert snap["live_sites"][0] == {"site": "/job/train.py:42 in train_step",
                                     "file": "/job/train.py", "line": 42,
                                     "function": "train_step", "bytes": 12 * MiB,
                                     "count": 2, "stack": [
                                         f"{TORCH_LINEAR[0]}:125 in forward",
                                         "/job/train.py:42 in train_step"]}


class Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_snapshot_is_refused_in_one_line_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    path = write(tmp_path / "evil.pickle", {"segments": [], "device_traces": [[Payload(str(marker))]]})
    assert main(["memory", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trainprof: ")
    assert "posix.system" in err and "--trust" in err
    assert not marker.exists()
    assert main(["report", path, "-o", str(tmp_path / "r.html"), "--no-progress"]) == 2
    assert not marker.exists() and not (tmp_path / "r.html").exists()


def test_trust_reads_a_legit_snapshot(tmp_path, capsys):
    assert main(["memory", write(tmp_path / "ok.pickle", oom_snapshot()), "--trust"]) == 0
    assert "fragmentation" in capsys.readouterr().out


def test_a_folder_of_snapshots_and_an_empty_folder(tmp_path, capsys):
    write(tmp_path / "rank0.step8.memory_snapshot.pickle", oom_snapshot())
    write(tmp_path / "rank1.step8.memory_snapshot.pickle", oom_snapshot())
    assert main(["memory", str(tmp_path), "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["snapshots"]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["memory", str(empty)]) == 2
    assert "holds no memory snapshot" in capsys.readouterr().err


def test_a_corrupt_snapshot_exits_2_with_one_sentence(tmp_path):
    path = tmp_path / "broken.pickle"
    path.write_bytes(pickle.dumps(oom_snapshot())[:200])
    done = subprocess.run([sys.executable, "-m", "trainprof", "memory", str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"trainprof: {path} is not a readable pickle")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_the_python_api_gives_what_the_cli_prints(tmp_path, capsys):
    import trainprof
    from trainprof.report.json import to_json_bytes

    path = write(tmp_path / "oom.pickle", oom_snapshot())
    assert main(["memory", path, "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(to_json_bytes(trainprof.memory_snapshot_report(path)))
    assert trainprof.load_snapshot(path)["device_traces"][0][-1]["action"] == "oom"


def test_a_snapshot_of_the_wrong_shape_inside_exits_2(tmp_path, capsys):
    snapshot = oom_snapshot()
    snapshot["segments"][0]["blocks"][0]["size"] = "eight megabytes"
    assert main(["memory", write(tmp_path / "odd.pickle", snapshot)]) == 2
    err = capsys.readouterr().err
    assert "is not shaped like a memory snapshot's" in err and err.count("\n") == 1


@pytest.mark.parametrize("width", [80, 140])
def test_snapshot_report_reads_whole_at_any_width(tmp_path, width):
    """No header or number cut (the devices table turns on its side at 80 columns), every line
    within the width, and the advice wraps under its own text."""
    import io

    from rich.console import Console

    from trainprof.diagnose.snapshot import memory_snapshot_report
    from trainprof.report.terminal.snapshot import print_memory_report

    report = memory_snapshot_report(write(tmp_path / "oom.pickle", oom_snapshot()))
    console = Console(file=io.StringIO(), width=width, record=True)
    print_memory_report(report, console)
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    for head in ("segments", "reserved", "free in split segments", "largest free block",
                 "fragmentation"):
        assert head in text, head
    assert "50.0%" in text and "25.17 MB" in text
    fix = [line for line in text.splitlines() if "Fix: Stop free memory" in line][0]
    after = text.splitlines()[text.splitlines().index(fix) + 1]
    indent = fix.index("Fix:")
    assert after[:indent].strip("│ ") == "" and after[indent] != " "


def test_a_real_shaped_snapshot_opens_on_one_sentence_naming_the_users_line(tmp_path, capsys,
                                                                          monkeypatch):
    """A snapshot as `_record_memory_history()` records it at its defaults (C++ frames between
    the Python ones: tests/helpers/snapshotgen.py, `cuda_stack`): the report opens on what holds the
    peak and the user's line it was allocated at, never on the allocator's C++ frames."""
    from helpers.snapshotgen import PARAM_BLOCKS, PARAM_SIZE, real_shaped_snapshot

    snap = real_shaped_snapshot("all")
    assert "memory_snapshot.cpp" in str(snap["segments"][0]["blocks"][0]["frames"])
    write(tmp_path / "real.pickle", snap)
    monkeypatch.chdir(tmp_path)  # a short name: a long temporary path wraps inside the sentence
    assert main(["memory", "real.pickle"]) == 0
    out = capsys.readouterr().out
    paragraph = " ".join(out.split("╭")[0].split())  # before the advice panel
    peak = max(h["peak_live"] for h in main_json(tmp_path / "real.pickle")["histories"])
    state = 2 * PARAM_BLOCKS * PARAM_SIZE
    sentence = paragraph.split(".pickle ", 1)[1]
    assert sentence == (
        f"cuda:0 at its peak ({main_json(tmp_path / 'real.pickle')['peaks'][0]['ms']:,.1f} ms "
        f"into the history): optimizer state holds {100 * state / peak:.0f}% of the "
        f"{peak / 1e9:,.2f} GB live ({state / 1e9:,.2f} GB), most of it allocated at "
        "/home/u/proj/cs336_basics/optimizers.py:82 in step (estimated from the stacks).")
    assert "gather_with_cpp" not in out and "memory_snapshot.cpp" not in out
    peak_table = " ".join(out[out.index("live at cuda:0's peak"):].split())
    assert peak_table.index("optimizers.py:82 in step") < peak_table.index("model.py:150")


def main_json(path) -> dict:
    from trainprof.diagnose.snapshot import memory_snapshot_report

    return memory_snapshot_report(path)["snapshots"][0]
