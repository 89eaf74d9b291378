"""``trainprof export`` and ``trainprof sql`` from the command line, read back independently."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from helpers.paths import NCCL_TRACE, RESNET_W0, ROOT, TRACE_FILTER
from raw_trace import of_category, raw_events

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("duckdb")

from trainprof.cli import main  # noqa: E402


def test_export_writes_every_table_and_counts_every_event(tmp_path, capsys):
    out = tmp_path / "run.parquet"
    assert main(["export", str(RESNET_W0), "-o", str(out)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["run.kernels.parquet", "run.ops.parquet", "run.parquet",
                     "run.ranks.parquet", "run.steps.parquet"]
    raw = raw_events(RESNET_W0)
    events = pq.read_table(out)
    assert events.num_rows == len(raw)
    kinds = Counter(events.column("kind").to_pylist())
    assert kinds["kernel"] == len(of_category(raw, "kernel"))
    assert kinds["memcpy"] == len(of_category(raw, "memcpy"))
    kernels = pq.read_table(tmp_path / "run.kernels.parquet")
    assert sorted(kernels.column("dur_us").to_pylist()) == sorted(
        float(e["dur"]) for e in of_category(raw, "kernel"))
    steps = pq.read_table(tmp_path / "run.steps.parquet").to_pylist()
    assert [s["step"] for s in steps] == list(range(5, 11))
    assert "wrote" in capsys.readouterr().err


def test_every_exported_column_is_documented(tmp_path):
    main(["export", str(NCCL_TRACE), "-o", str(tmp_path)])
    docs = (ROOT / "docs/sql.md").read_text()
    documented = set(re.findall(r"`(\w+)`", docs))
    for path in tmp_path.glob("*.parquet"):
        missing = set(pq.read_schema(path).names) - documented
        assert not missing, f"{path.name}: {missing} not in docs/sql.md"


def test_a_folder_of_ranks_is_one_set_of_tables(tmp_path):
    main(["export", str(TRACE_FILTER), "-o", str(tmp_path)])
    events = pq.read_table(tmp_path / "events.parquet")
    per_rank = Counter(events.column("rank").to_pylist())
    assert per_rank == {r: len(raw_events(TRACE_FILTER / f"sampled_rank-{r}.json.gz"))
                        for r in (0, 1)}
    ranks = pq.read_table(tmp_path / "ranks.parquet").to_pylist()
    assert [(r["rank"], r["file"]) for r in ranks] == [
        (0, "sampled_rank-0.json.gz"), (1, "sampled_rank-1.json.gz")]


def test_sql_csv_and_json_give_the_same_rows(capsys):
    query = "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY n DESC, kind"
    assert main(["sql", str(RESNET_W0), query, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert main(["sql", str(RESNET_W0), query, "--format", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert [(r["kind"], int(r["n"])) for r in rows] == [(r["kind"], r["n"]) for r in as_json]
    raw = raw_events(RESNET_W0)
    assert sum(r["n"] for r in as_json) == len(raw)
    kernels = {r["kind"]: r["n"] for r in as_json}["kernel"]
    assert kernels == len(of_category(raw, "kernel"))


def test_sql_text_table_and_output_file(tmp_path, capsys):
    out = tmp_path / "steps.txt"
    assert main(["sql", str(RESNET_W0), "SELECT step, dur_us FROM steps ORDER BY step",
                 "-o", str(out)]) == 0
    text = out.read_text()
    assert "step" in text and "6 rows" in text
    assert re.search(r"\b10\b", text)


@pytest.mark.parametrize(("args", "words"), [
    (["sql", str(RESNET_W0), "SELEC name FROM kernels"], "the query failed"),
    (["sql", str(RESNET_W0), "SELECT nope FROM kernels"], "the query failed"),
    (["sql", str(RESNET_W0), "  "], "the query is empty"),
    # nothing phones home: DuckDB does not fetch the extension that would read a URL
    (["sql", str(RESNET_W0), "SELECT * FROM read_csv('https://example.com/x.csv')"],
     "requires the extension httpfs"),
    (["sql", "no-such-trace.json", "SELECT 1"], "no-such-trace.json"),
    (["export", "no-such-trace.json", "-o", "x.parquet"], "no-such-trace.json"),
])
def test_bad_input_is_one_sentence_and_exit_2(args, words):
    proc = subprocess.run([sys.executable, "-m", "trainprof", *args], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT / "src"),
                                                    "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_without_the_sql_extra_it_says_what_to_install():
    code = ("import sys; sys.modules['duckdb'] = None; "
            "from trainprof.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "sql", str(RESNET_W0), "SELECT 1"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "pip install 'trainprof[sql]'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_findings_of_a_folder_carry_their_rank(capsys):
    import trainprof

    assert main(["sql", str(TRACE_FILTER), "SELECT rank, id, saving_pct FROM findings",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    expected = trainprof.analyze(TRACE_FILTER).findings
    assert [(r["rank"], r["id"]) for r in rows] == [(f.rank, f.id) for f in expected]
    assert {r["rank"] for r in rows} == {0, 1}


def test_json_gives_numbers_for_decimals_and_null_for_nan(capsys):
    query = "SELECT 1.5 AS d, 'nan'::DOUBLE AS n, NULL AS z, 7 AS i"
    assert main(["sql", str(RESNET_W0), query, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"d": 1.5, "n": None, "z": None, "i": 7}]


@pytest.mark.parametrize("target", ["run.parquet", "tables"])
def test_sql_reads_an_export_in_place_with_the_same_answers(tmp_path, capsys, target):
    query = ("SELECT e.kind, count(*) AS n, sum(e.dur_us) AS us FROM events e "
             "JOIN ranks r USING (rank, rank_window) GROUP BY e.kind ORDER BY e.kind")
    assert main(["export", str(TRACE_FILTER), "-o", str(tmp_path / target)]) == 0
    capsys.readouterr()
    assert main(["sql", str(tmp_path / target), query, "--format", "json"]) == 0
    from_export = json.loads(capsys.readouterr().out)
    assert main(["sql", str(TRACE_FILTER), query, "--format", "json"]) == 0
    assert from_export == json.loads(capsys.readouterr().out)
    assert sum(r["n"] for r in from_export) == sum(
        len(raw_events(TRACE_FILTER / f"sampled_rank-{r}.json.gz")) for r in (0, 1))
    assert main(["sql", str(tmp_path / target), "SELECT * FROM findings"]) == 2
    assert "needs the trace itself" in capsys.readouterr().err
