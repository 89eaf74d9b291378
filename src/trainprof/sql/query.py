"""``trainprof sql``: DuckDB over a trace's tables (docs/sql.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec

from trainprof.errors import TrainprofError
from trainprof.sql.export import output_paths
from trainprof.sql.extras import require
from trainprof.sql.tables import ALL_TABLES, TRACE_TABLES, findings_table, tables_of
from trainprof.trace.load import load


class QueryResult(msgspec.Struct):
    """Column names and rows of a query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def tables_named(query: str) -> list[str]:
    """The known tables a query mentions (only those are built)."""
    words = set(re.findall(r"[a-z_]+", query.lower()))
    return [name for name in ALL_TABLES if name in words]


def exported_tables(source: str | os.PathLike[str]) -> dict[str, Path]:
    """The Parquet files ``trainprof export`` wrote at ``source`` (``X.parquet`` and its
    ``X.<table>.parquet``, or a folder of ``<table>.parquet``), by table; empty otherwise."""
    path = Path(source)
    if path.is_file() and path.suffix.lower() == ".parquet" or path.is_dir() and (path / "events.parquet").is_file():
        found = output_paths(path)
    else:
        return {}
    return {name: p for name, p in found.items() if p.is_file()}


def connect(source: str | os.PathLike[str], query: str = "") -> Any:
    """A DuckDB connection with the tables of ``source`` registered (all of them, or only
    those ``query`` names). ``source`` is a trace, a folder of ranks, or what ``trainprof
    export`` wrote (read in place, without loading the trace again)."""
    duckdb = require("duckdb", "trainprof sql")
    wanted = tables_named(query) if query else list(ALL_TABLES)
    exported = exported_tables(source)
    if exported:
        return _connect_exported(duckdb, exported, wanted)
    require("pyarrow", "trainprof sql")
    traces = load(source)
    tables = tables_of(traces, [n for n in wanted if n in TRACE_TABLES])
    if "findings" in wanted:
        from trainprof.pipeline import analyze

        tables["findings"] = findings_table(analyze(traces, workers=1).findings)
    con = _new_connection(duckdb)
    for name, table in tables.items():
        con.register(name, table)
    return con


def _new_connection(duckdb: Any) -> Any:
    # Nothing phones home: DuckDB must not download an extension because a query names a URL.
    return duckdb.connect(config={"autoinstall_known_extensions": False,
                                  "autoload_known_extensions": False})


def _connect_exported(duckdb: Any, files: dict[str, Path], wanted: list[str]) -> Any:
    if "findings" in wanted:
        raise TrainprofError("the findings table needs the trace itself (an export holds "
                             "events, kernels, ops, steps and ranks); give the trace.")
    con = _new_connection(duckdb)
    for name, path in files.items():
        quoted = str(path).replace("'", "''")
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{quoted}')")
    return con


def run_query(source: str | os.PathLike[str], query: str) -> QueryResult:
    """The result of one SQL query over the traces at ``source``."""
    duckdb = require("duckdb", "trainprof sql")
    con = connect(source, query)
    try:
        cursor = con.execute(query)
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        raise TrainprofError(f"the query failed: {first}") from None
    if cursor.description is None:
        return QueryResult([], [])
    return QueryResult([d[0] for d in cursor.description], cursor.fetchall())
