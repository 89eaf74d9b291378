"""``trainprof sql``: DuckDB over a trace's tables (docs/sql.md)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from trainprof.errors import TrainprofError
from trainprof.sql.extras import require
from trainprof.sql.tables import ALL_TABLES, TRACE_TABLES, findings_table, tables_of
from trainprof.trace.load import load


@dataclass
class QueryResult:
    """Column names and rows of a query."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def tables_named(query: str) -> list[str]:
    """The known tables a query mentions (only those are built)."""
    words = set(re.findall(r"[a-z_]+", query.lower()))
    return [name for name in ALL_TABLES if name in words]


def connect(source: str | os.PathLike[str], query: str = "") -> Any:
    """A DuckDB connection with the tables of ``source`` registered (all of them, or only
    those ``query`` names)."""
    duckdb = require("duckdb", "trainprof sql")
    require("pyarrow", "trainprof sql")
    wanted = tables_named(query) if query else list(ALL_TABLES)
    traces = load(source)
    tables = tables_of(traces, [n for n in wanted if n in TRACE_TABLES])
    if "findings" in wanted:
        from trainprof.pipeline import analyze

        tables["findings"] = findings_table(analyze(traces, workers=1).findings)
    # Nothing phones home: DuckDB must not download an extension because a query names a URL.
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for name, table in tables.items():
        con.register(name, table)
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
