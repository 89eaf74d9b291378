"""Export and SQL over one trace: load + tables, Parquet writing, file sizes, and queries.

    python benchmarks/bench_sql.py [TRACE] [--repeats 3]

Default trace: the 53 MB ``df_index_resolver`` trace in tests/data/traces. Reports the median of
the repeats for: loading the trace, building the five tables, writing them as Parquet (zstd),
the Parquet size against the JSON (gzipped and not), a query through ``trainprof sql``'s own
path (load, tables, DuckDB), and the same query over the exported Parquet with DuckDB alone.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from trainprof.sql.export import export
from trainprof.sql.query import run_query
from trainprof.sql.tables import tables_of
from trainprof.trace.load import load

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests/data/traces/hta/tests/data/df_index_resolver/df_index_resolver.json.gz"
QUERY = ("SELECT name, count(*) AS calls, sum(dur_us) / 1000 AS total_ms FROM kernels "
         "GROUP BY name ORDER BY total_ms DESC LIMIT 10")


def timed(work) -> tuple[float, object]:
    start = time.perf_counter()
    out = work()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    raw = args.trace.stat().st_size
    opener = gzip.open if args.trace.name.endswith(".gz") else open
    with opener(args.trace, "rb") as f:
        json_bytes = len(f.read())
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        for _ in range(args.repeats):
            t_load, traces = timed(lambda: load(args.trace))
            t_tables, _ = timed(lambda traces=traces: tables_of(traces))
            t_export, paths = timed(lambda: export(args.trace, out))
            t_sql, _ = timed(lambda: run_query(args.trace, QUERY))
            parquet = str(out / "kernels.parquet")
            t_duck, _ = timed(lambda parquet=parquet: duckdb.sql(
                QUERY.replace("FROM kernels", f"FROM '{parquet}'")).fetchall())
            for key, value in (("load", t_load), ("tables", t_tables), ("export", t_export),
                               ("sql", t_sql), ("duckdb on parquet", t_duck)):
                results.setdefault(key, []).append(value)
        size = sum(p.stat().st_size for p in paths.values())
    print(f"{args.trace.name}: {json_bytes / 1e6:.1f} MB JSON, {raw / 1e6:.1f} MB on disk, "
          f"Parquet (5 tables, zstd) {size / 1e6:.2f} MB = {size / json_bytes:.1%} of the JSON, "
          f"{size / raw:.0%} of the file")
    for key, values in results.items():
        print(f"{key:>18}: {statistics.median(values):.3f} s (median of {len(values)})")


if __name__ == "__main__":
    main()
