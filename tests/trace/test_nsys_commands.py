"""The commands on Nsight Systems exports: analyze, compare and sql end to end, and bad input
as one sentence with exit code 2 (figures checked against direct SQL over the export)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from trainprof.cli import main

from helpers.paths import NSYS_H100, NSYS_HEALTHY, NSYS_MOCK


@pytest.fixture(scope="module")
def h100_json(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("nsys") / "h100.json"
    assert main(["analyze", str(NSYS_H100), "--format", "json", "-o", str(out),
                 "--no-progress"]) == 0
    return json.loads(out.read_text())


def _sql(query: str) -> list[tuple]:
    with sqlite3.connect(NSYS_H100) as db:
        return db.execute(query).fetchall()


def test_analyze_reads_the_h100_capture_as_a_two_rank_job(h100_json):
    per_device = dict(_sql('SELECT deviceId, sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL '
                           "GROUP BY deviceId"))
    ranks = h100_json["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r, device in zip(ranks, (0, 1), strict=True):
        assert r["kernels"]["total_us"] == pytest.approx(per_device[device] / 1000.0, abs=1e-3)
        assert r["environment"]["world_size"] == 2
        assert any("ranks in the order of their process ids" in n for n in r["notes"])
    assert len(h100_json["job"]["stragglers"]["ranks"]) == 2


def test_every_section_runs_on_an_export(h100_json):
    rank = h100_json["ranks"][0]
    for section in ("idle", "copies", "communication", "operators", "kernels", "launch", "syncs",
                    "roofline", "critical_path"):
        assert rank[section] is not None, section
    syncs = _sql("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 3 "
                 "AND globalPid = (SELECT min(globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")[0][0]
    assert rank["syncs"]["count"] == syncs  # stream syncs block the host; stream waits do not


def test_compare_of_two_exports_gives_a_verdict(capsys):
    assert main(["compare", str(NSYS_HEALTHY), str(NSYS_MOCK), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "NEW's median step is" in out and "faster than BASE's" in out


def test_sql_on_an_export(capsys):
    assert main(["sql", str(NSYS_H100), "SELECT rank, count(*) FROM kernels GROUP BY rank "
                 "ORDER BY rank", "--format", "csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[1:]
    expected = _sql("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY globalPid "
                    "ORDER BY globalPid")
    assert rows == [f"{rank},{n}" for rank, (n,) in enumerate(expected)]


def test_a_sqlite_file_that_is_no_export_is_one_sentence_and_exit_2(tmp_path, capsys):
    path = tmp_path / "notes.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE notes (text)")
    assert main(["analyze", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not an Nsight Systems export" in err
