"""`trainprof history`, `analyze --record` and `compare` with history ids, on real traces."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import trainprof
import trainprof.history as history
from trainprof.cli import main
from trainprof.history.store.rows import RunRecord

from helpers.paths import RESNET_W0, RESNET_W4, ROOT


@pytest.fixture(scope="module")
def resnet_runs():
    """The ResNet run before (num_workers=0) and after (num_workers=4) the DataLoader fix."""
    return trainprof.analyze(RESNET_W0), trainprof.analyze(RESNET_W4)


def series_db(path, hostile: bool = False):
    """A synthetic series in a database: 12 steady runs, then a 15% slower one and more."""
    rng = np.random.default_rng(3)
    name = "<script>alert(1)</script>" if hostile else "nightly"
    for i in range(16):
        level = 100.0 if i < 12 else 115.0
        steps = (level * (1 + rng.normal(0, 0.01)) * rng.lognormal(0, 0.03, 50)).tolist()
        history.record(RunRecord(name=name, kind="step_timer", recorded_at=1.7e9 + i * 3600,
                                 step_times_ms=steps, step_ms_median=float(np.median(steps)),
                                 samples_per_s=64000 / float(np.median(steps)), steps=50,
                                 git_commit=f"{i:02d}" + "ab" * 19), db=path)
    return name


def test_analyze_record_then_history_shows_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # a wide terminal: every column of the runs table
    db = tmp_path / "h.db"
    assert main(["analyze", str(RESNET_W0), "--format", "json", "-o", str(tmp_path / "r.json"),
                 "--record", "--name", "resnet", "--db", str(db)]) == 0
    assert "recorded as history:1 in" in capsys.readouterr().err
    (row,) = history.History(db).runs()
    assert (row.name, row.kind, row.steps, row.world_size) == ("resnet", "analysis", 6, 1)
    assert row.devices == "Tesla V100-DGXS-32GB"
    assert row.step_ms_median == pytest.approx(177.4, abs=0.1)
    assert row.top_finding["id"] == "data_loading"
    assert row.extra["breakdown_ms"]["dataloader"] > 50
    assert main(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "resnet" in out and "177.4" in out and "data_loading" in out
    assert main(["history", "--db", str(db), "show", "@1"]) == 0
    shown = capsys.readouterr().out
    assert "history:1 resnet" in shown and "Waiting for data takes 33%" in shown


def test_the_trend_and_the_regression_in_the_terminal(tmp_path, capsys):
    db = tmp_path / "h.db"
    series_db(db)
    assert main(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    title = lines.index("nightly (step timer, 16 runs)")
    step_ms, samples = lines[title + 1].split(), lines[title + 2].split()
    assert step_ms[:2] == ["step", "ms"] and samples[0] == "samples/s"
    bars = step_ms[2]
    assert len(bars) == 16 and set(bars) <= set("▁▂▃▄▅▆▇█") and max(bars) in bars[12:]
    assert max(samples[1]) in samples[1][:12]  # throughput fell at the same run
    assert "regression at #13" in out and "almost certain" in out
    assert out.count("regression at") == 1


def test_exports_carry_every_run_and_the_flagged_change(tmp_path, capsys):
    db = tmp_path / "h.db"
    series_db(db)
    assert main(["history", "--db", str(db), "--export", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "trainprof.history/1" and len(data["runs"]) == 16
    assert [c["runs"] for c in data["changes"]] == [[13]]
    assert data["changes"][0]["status"] == "regression"
    assert data["runs"][12]["verdict"]["status"] == "regression"
    assert data["runs"][0]["recorded_at"].endswith("Z") and "step_times_ms" not in data["runs"][0]
    out = tmp_path / "runs.csv"
    assert main(["history", "--db", str(db), "--export", "csv", "-o", str(out), "--since",
                 "2023-11-14"]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 16
    assert rows[12]["status"] == "regression" and float(rows[12]["change_pct"]) > 10
    assert rows[0]["git_commit"] == "00" + "ab" * 19


def test_filters_on_the_command_line(tmp_path, capsys):
    db = tmp_path / "h.db"
    series_db(db)
    history.record(RunRecord(name="other", kind="analysis", step_ms_median=5.0), db=db)
    assert main(["history", "--db", str(db), "--name", "oth*", "--export", "json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["other"]
    assert main(["history", "--db", str(db), "--since", "1h", "--export", "json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["other"]
    assert main(["history", "--db", str(db), "--commit", "03ab", "--export", "json"]) == 0
    assert [r["git_commit"][:2] for r in json.loads(capsys.readouterr().out)["runs"]] == ["03"]
    with pytest.raises(SystemExit) as stop:
        main(["history", "--db", str(db), "--since", "last tuesday"])
    assert stop.value.code == 2


def test_the_html_page_charts_each_name_and_escapes_names(tmp_path, capsys):
    db = tmp_path / "h.db"
    name = series_db(db, hostile=True)
    page = tmp_path / "history.html"
    assert main(["history", "--db", str(db), "--format", "html", "-o", str(page)]) == 0
    html = page.read_text()
    assert name not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()
    assert html.count("<svg") == 2  # step time and samples/s
    assert html.count("<polyline") == 2  # median (no p90 recorded) and samples/s
    assert 'fill="#c8372d"' in html  # the regression's dot
    assert "regression at #13" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")


def test_compare_reads_history_ids(tmp_path, resnet_runs, monkeypatch, capsys):
    db = tmp_path / "h.db"
    before, after = resnet_runs
    assert history.record(before, name="resnet", db=db) == 1
    assert history.record(after, name="resnet", db=db) == 2
    monkeypatch.setenv("TRAINPROF_HISTORY_DB", str(db))
    assert main(["compare", "@1", "history:2", "--format", "json", "--fail-if-slower", "5"]) == 0
    data = json.loads(capsys.readouterr().out)
    steps_before = sum(r.steps.count for r in before.ranks)
    assert data["base"]["steps"] == steps_before and data["base"]["label"] == "@1"
    assert data["new"]["median_step_ms"] < 0.8 * data["base"]["median_step_ms"]
    assert data["breakdown_ms"]["dataloader"]["delta"] < -40
    assert data["gate"]["failed"] is False
    assert main(["compare", "history:2", "@1", "--fail-if-slower", "5", "--format", "md"]) == 1
    assert "FAIL" in capsys.readouterr().err
    assert main(["compare", "@1", "@99"]) == 2
    assert "No run with id 99" in capsys.readouterr().err


def test_a_damaged_database_never_costs_the_analysis(tmp_path):
    """`history` refuses it (exit 2); `analyze --record` writes its result all the same, warns
    in one line and exits 3 (the run kept in the pending file)."""
    db = tmp_path / "h.db"
    db.write_bytes(b"\x00junk" * 1000)
    history_cmd = subprocess.run([sys.executable, "-m", "trainprof", "history", "--db", str(db)],
                                 capture_output=True, text=True, cwd=ROOT)
    assert history_cmd.returncode == 2, history_cmd.stderr
    (line,) = history_cmd.stderr.strip().splitlines()
    assert line.startswith(f"trainprof: The history database {db} is damaged")
    result = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "trainprof", "analyze", str(RESNET_W0),
                           "--record", "--db", str(db), "--format", "json", "-o", str(result)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(result.read_text())["schema"] == "trainprof.analysis/1"
    wrote, line = proc.stderr.strip().splitlines()
    assert wrote == f"trainprof: wrote {result}"
    assert line.startswith(f"trainprof: warning: not recorded in the history: The history "
                           f"database {db} is damaged") and "Traceback" not in proc.stderr
    assert "kept in" in line and (tmp_path / "h.db.pending.jsonl").is_file()


def test_a_database_damaged_in_its_middle_is_not_written_into(tmp_path):
    """Its header is intact, so an insert would land in a good page: SQLite's integrity check
    before the write refuses it, as reading it does."""
    db = tmp_path / "h.db"
    for i in range(200):
        history.record(_one_run(i), name=f"run{i}", db=db, git_commit="a" * 40)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert pages > 6
    data = bytearray(db.read_bytes())
    middle = (pages // 2) * page
    data[middle:middle + page] = b"\xa5" * page  # one page in the middle garbled
    db.write_bytes(bytes(data))
    before = db.read_bytes()
    with pytest.raises(history.HistoryCorruptError, match="integrity check|damaged"):
        history.record(_one_run(999), name="late", db=db)
    assert db.read_bytes() == before
    assert (tmp_path / "h.db.pending.jsonl").is_file()


def _one_run(i: int) -> dict:
    return {"steps": 3, "step_ms": {"median": 10.0 + i % 7, "mean": 10.0 + i % 7},
            "phases_ms": {}, "samples_per_s": 10.0}


def test_history_add_reads_summaries_and_results(tmp_path, capsys):
    db = tmp_path / "h.db"
    cluster = tmp_path / "job" / "cluster_summary.json"
    cluster.parent.mkdir()
    cluster.write_text(json.dumps({"world_size": 2, "ranks": [
        {"rank": 0, "per_step_ms": [10.0, 11.0, 12.0], "phases_ms": {"data": 1.0},
         "samples_per_s": 100.0, "peak_memory_bytes": 1000, "host": "node-a"},
        {"rank": 1, "steps": {"count": 3, "median_ms": 20.0, "per_step": [{"ms": 19.0},
                                                                        {"ms": 20.0}, {"ms": 21.0}]},
         "phases_ms": {"data": 3.0}, "samples_per_s": 50.0, "peak_memory_bytes": 3000,
         "host": "node-a", "extra": {"ignored": True}},
    ], "findings": [{"id": "straggler", "severity": "high", "title": "Rank 1 is slow",
                     "saving_pct": 40.0, "rank": 1}]}))
    timer_summary = tmp_path / "timer.json"
    timer_summary.write_text(json.dumps({"steps": 5, "step_ms": {"median": 7.0, "mean": 7.5},
                                         "phases_ms": {}, "samples_per_s": 10.0}))
    assert main(["history", "add", str(cluster), str(timer_summary), "--db", str(db)]) == 0
    job, timer = history.History(db).runs()
    assert (job.name, job.kind, job.world_size, job.steps, job.host) == ("job", "cluster", 2, 6,
                                                                         "node-a")
    assert job.step_ms_median == 15.5 and job.step_ranks == [[0, 3], [1, 3]]
    assert job.samples_per_s == 150.0 and job.peak_memory_bytes == 3000
    assert job.phases_ms == {"data": 2.0} and job.top_finding["id"] == "straggler"
    assert (timer.name, timer.kind, timer.step_ms_median) == ("timer", "step_timer", 7.0)
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": "else"}')
    assert main(["history", "add", str(bad), "--db", str(db)]) == 2
    assert "neither a saved result" in capsys.readouterr().err


def test_a_cluster_summary_without_step_times_uses_the_ranks_medians():
    rec = history.to_record({"ranks": [{"rank": 0, "step_ms": {"median": 10.0, "mean": 11.0}},
                                       {"rank": 1, "median_step_ms": 14.0}]}, name="j")
    assert (rec.kind, rec.step_ms_median, rec.step_ms_mean, rec.steps) == ("cluster", 12.0, 11.0, 0)
    assert rec.step_times_ms == [] and rec.world_size == 2


def test_history_writes_every_format_to_its_file(tmp_path, capsys):
    """`-o` writes the file (text too), its ending picks the format, and one line says where."""
    db = tmp_path / "h.db"
    for i in range(3):
        history.record(_one_run(i), name="run", db=db)
    capsys.readouterr()
    for name in ("h.txt", "h.csv", "h.json"):
        out = tmp_path / name
        assert main(["history", "--db", str(db), "-o", str(out)]) == 0
        assert capsys.readouterr().err == f"trainprof: wrote {out}\n"
    assert "Runs in" in (tmp_path / "h.txt").read_text()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "h.csv").read_text())))
    assert len(rows) == 3
    assert len(json.loads((tmp_path / "h.json").read_text())["runs"]) == 3


@pytest.mark.parametrize(("gap_s", "unit", "last_tick"), [
    (5, "seconds since", "20"), (600, "minutes since", "40"), (3600, "hours since", "4"),
    (86400 * 7, "days since", "20")])
def test_the_history_time_axis_reads_in_a_unit_that_fits(tmp_path, gap_s, unit, last_tick):
    """Runs seconds apart read "seconds since", not "hours since ... 0.0000-0.0005"."""
    db = tmp_path / "h.db"
    for i in range(5):
        history.record(RunRecord(name="ci", kind="step_timer", recorded_at=1.7e9 + i * gap_s,
                                 step_times_ms=[10.0, 11.0], step_ms_median=10.5, steps=2), db=db)
    page = tmp_path / "history.html"
    assert main(["history", "--db", str(db), "--format", "html", "-o", str(page)]) == 0
    html = page.read_text()
    assert unit in html
    ticks = [t for t in re.findall(r'class="tick"[^>]*>([^<]+)<', html)]
    assert last_tick in ticks and "0.0005" not in ticks


def test_a_one_run_series_says_what_it_measured_instead_of_an_empty_chart(tmp_path):
    db = tmp_path / "h.db"
    history.record(RunRecord(name="first", kind="step_timer", recorded_at=1.7e9,
                             step_times_ms=[10.0, 12.0], step_ms_median=11.0, steps=2,
                             samples_per_s=512.0), db=db)
    page = tmp_path / "history.html"
    assert main(["history", "--db", str(db), "--format", "html", "-o", str(page)]) == 0
    html = page.read_text()
    assert "<svg" not in html and "<polyline" not in html
    assert "median step 11.0 ms, 512 samples/s. The chart starts with the second run." in html
