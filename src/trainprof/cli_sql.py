"""The arguments of ``trainprof export`` and ``trainprof sql`` (``commands/export.py`` and
``commands/sql.py`` run them; docs/sql.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_sql_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``trainprof export`` and ``trainprof sql`` to the command line."""
    p = sub.add_parser("export", help="write a trace's events, kernels, ops, steps and ranks "
                                      "as Parquet (docs/sql.md)")
    p.add_argument("path", type=Path, help="a trace file or a folder of ranks")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="X.parquet (the events; the other tables go to X.kernels.parquet, ...) "
                        "or a folder for events.parquet, kernels.parquet, ...")

    p = sub.add_parser("sql", help="run a DuckDB query over a trace's tables: events, kernels, "
                                   "ops, steps, ranks, findings (docs/sql.md)")
    p.add_argument("path", type=Path, help="a trace file, a folder of ranks, or what "
                                           "`trainprof export` wrote (read in place)")
    p.add_argument("query", help='the SQL, e.g. "SELECT name, sum(dur_us) FROM kernels '
                                 'GROUP BY name ORDER BY 2 DESC LIMIT 10"')
    p.add_argument("--format", choices=("text", "csv", "json"), default="text")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")
