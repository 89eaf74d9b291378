"""The ``export`` and ``sql`` subcommands (arguments and what they run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainprof.errors import TrainprofError


def add_sql_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``trainprof export`` and ``trainprof sql`` to the command line."""
    p = sub.add_parser("export", help="write a trace's events, kernels, ops, steps and ranks "
                                      "as Parquet (docs/sql.md)")
    p.add_argument("path", type=Path, help="a trace file or a folder of ranks")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="X.parquet (the events; the other tables go to X.kernels.parquet, ...) "
                        "or a folder for events.parquet, kernels.parquet, ...")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("sql", help="run a DuckDB query over a trace's tables: events, kernels, "
                                   "ops, steps, ranks, findings (docs/sql.md)")
    p.add_argument("path", type=Path, help="a trace file, a folder of ranks, or what "
                                           "`trainprof export` wrote (read in place)")
    p.add_argument("query", help='the SQL, e.g. "SELECT name, sum(dur_us) FROM kernels '
                                 'GROUP BY name ORDER BY 2 DESC LIMIT 10"')
    p.add_argument("--format", choices=("text", "csv", "json"), default="text")
    p.add_argument("-o", "--output", type=Path, help="write the result to this file")
    p.set_defaults(func=cmd_sql)


def cmd_export(args: argparse.Namespace) -> int:
    from trainprof.fileio import announce_written
    from trainprof.sql.export import export

    if args.output.exists() and args.output.is_dir() and args.output.suffix == ".parquet":
        raise TrainprofError(f"{args.output} is a folder; give a file name ending in .parquet.")
    for path in export(args.path, args.output).values():
        announce_written(path)
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from trainprof.fileio import write_or_print
    from trainprof.sql.query import run_query

    if not args.query.strip():
        raise TrainprofError("the query is empty; give a SELECT over events, kernels, ops, "
                             "steps, ranks or findings.")
    result = run_query(args.path, args.query)
    if args.format == "csv":
        from trainprof.report.query_result import to_csv

        write_or_print(to_csv(result), args.output)
    elif args.format == "json":
        from trainprof.report.query_result import to_json

        write_or_print(to_json(result), args.output)
    else:
        from trainprof.report.output import print_or_save
        from trainprof.report.query_result import print_table

        print_or_save(lambda console: print_table(result, console), args.output)
    return 0
