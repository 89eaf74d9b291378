"""``trainprof export``: a trace's tables as Parquet files, for DuckDB, Polars or pandas."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainprof.fileio import temp_path_beside
from trainprof.sql.extras import require
from trainprof.sql.tables import TRACE_TABLES, tables_of
from trainprof.trace.load import load


def output_paths(output: Path) -> dict[str, Path]:
    """Where each table goes: ``X.parquet`` holds the events and ``X.<table>.parquet`` the
    others; a folder (no ``.parquet`` ending) holds ``events.parquet``, ``kernels.parquet``..."""
    if output.suffix.lower() == ".parquet":
        stem = output.with_suffix("")
        return {name: output if name == "events" else stem.with_name(f"{stem.name}.{name}.parquet")
                for name in TRACE_TABLES}
    return {name: output / f"{name}.parquet" for name in TRACE_TABLES}


def write_parquet(table: Any, path: Path) -> Path:
    """``table`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    pq = require("pyarrow.parquet", "Export to Parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_beside(path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def export(source: str | os.PathLike[str], output: str | os.PathLike[str]) -> dict[str, Path]:
    """Write the tables of the trace or folder of ranks at ``source``; returns their paths."""
    require("pyarrow", "Export to Parquet")
    paths = output_paths(Path(output))
    tables = tables_of(load(source))
    return {name: write_parquet(tables[name], paths[name]) for name in TRACE_TABLES}
