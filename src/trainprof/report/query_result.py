"""A SQL query's result as a text table, CSV or JSON (``trainprof sql --format``)."""

from __future__ import annotations

import csv
import io
import math
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from trainprof.sql.query import QueryResult


def _plain(value: Any) -> Any:
    """A JSON-friendly value: NaN and infinities become null, other objects their text."""
    if isinstance(value, Decimal):  # DuckDB's DECIMAL (a literal such as 1.5)
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def to_json(result: QueryResult) -> str:
    """One JSON object per row, in a list."""
    rows = [{k: _plain(v) for k, v in row.items()} for row in result.to_dicts()]
    return msgspec.json.format(msgspec.json.encode(rows), indent=2).decode() + "\n"


def to_csv(result: QueryResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([["" if v is None else v for v in row] for row in result.rows])
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1e15 else f"{value:.4g}"
    return str(value)


def print_table(result: QueryResult, console: Console) -> None:
    """The rows as a terminal table, numbers right-aligned."""
    table = Table(show_edge=False, header_style="bold")
    numeric = [bool(result.rows) and all(isinstance(r[i], int | float) or r[i] is None
                                         for r in result.rows) for i in range(len(result.columns))]
    for name, right in zip(result.columns, numeric, strict=True):
        table.add_column(name, justify="right" if right else "left", overflow="fold")
    for row in result.rows:
        table.add_row(*[_cell(v) for v in row])
    console.print(table)
    console.print(f"{len(result.rows)} row{'s' if len(result.rows) != 1 else ''}", style="dim")
