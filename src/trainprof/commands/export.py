"""``trainprof export``: a trace's tables as Parquet files (docs/sql.md)."""

from __future__ import annotations

import argparse

from trainprof.errors import TrainprofError


def main(args: argparse.Namespace) -> int:
    from trainprof.fileio import announce_written
    from trainprof.sql.export import export

    if args.output.exists() and args.output.is_dir() and args.output.suffix == ".parquet":
        raise TrainprofError(f"{args.output} is a folder; give a file name ending in .parquet.")
    for path in export(args.path, args.output).values():
        announce_written(path)
    return 0
