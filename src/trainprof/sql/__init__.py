"""Trace columns as Arrow tables: Parquet export and SQL (DuckDB) over traces (docs/sql.md).

pyarrow and duckdb are the ``trainprof[sql]`` extra, imported only when a function here runs.
"""
