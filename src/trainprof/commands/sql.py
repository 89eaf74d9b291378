"""``trainprof sql``: a DuckDB query over a trace's tables, as a table, CSV or JSON (docs/sql.md)."""

from __future__ import annotations

import argparse

from trainprof.errors import TrainprofError


def main(args: argparse.Namespace) -> int:
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
        from trainprof.fileio import print_or_save
        from trainprof.report.query_result import print_table

        print_or_save(lambda console: print_table(result, console), args.output)
    return 0
