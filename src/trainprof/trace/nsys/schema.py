"""An Nsight Systems SQLite export opened read-only, its tables and columns discovered.

nsys versions name and lay out tables differently (a column added, an ENUM table missing, a
minimal export with only the kernel table), so nothing here assumes a column exists: each
reader asks ``has``/``pick`` and falls back to a default.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from functools import cached_property
from itertools import chain
from pathlib import Path
from types import ModuleType

import numpy as np

from trainprof.errors import NotATraceError, TraceError

#: Rows fetched at a time: the tables are read in pieces, never as one list of all rows.
FETCH_ROWS = 1 << 16
#: Tables that make a SQLite database an Nsight Systems export (any one of them).
EXPORT_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                 "META_DATA_EXPORT")
#: The export schema major version these readers were written for (nsys 2026.x writes 3.x).
KNOWN_SCHEMA_MAJOR = 3


def _compiled() -> ModuleType | None:
    """The compiled rows reader (trace/nsys/_rows.c), where it was built."""
    try:
        from trainprof.trace.nsys import _rows  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _rows


_ROWS = _compiled()
#: A text column's values: (int32 index of each row's text into the distinct texts, -1 for
#: NULL; the distinct texts in the order they first appear).
Texts = tuple[np.ndarray, list[str]]
#: The fields torch's emit_nvtx appends to an op's name, after ``, `` (trace/nsys/nvtx.py).
TORCH_FIELDS = ("seq = ", "op_id = ", "sizes = ")
_SIZES, _INPUT_OP_IDS = "sizes = ", ", input_op_ids = "


def nvtx_key(text: str | None) -> tuple[str, str | None]:
    """(key, sizes) of an NVTX range's text, as _rows.c's ``n`` column cuts it: key ``T<op>``
    when one of torch's fields follows the first ``, `` (sizes: the text of ``sizes = ...``,
    else None), else ``X<text>`` (sizes None)."""
    text = text or ""
    name, comma, rest = text.partition(", ")
    if not comma or not name or not rest.startswith(TORCH_FIELDS):
        return "X" + text, None
    at = rest.find(_SIZES)
    if at < 0:
        return "T" + name, None
    end = rest.find(_INPUT_OP_IDS, at)
    return "T" + name, rest[at + len(_SIZES):end if end >= 0 else len(rest)]


class Export:
    """One export, opened read-only; ``close`` when done (or use it as a context manager)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._columns: dict[str, set[str]] = {}
        #: Rows read by the table readers: all, or those whose rowid is in [lo, hi) (a piece of
        #: a table, trace/nsys/spill.py).
        self.rowids: tuple[int, int] | None = None
        self.uri = uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        try:
            self.db = sqlite3.connect(uri, uri=True)
            self.tables = {name for (name,) in self.db.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.DatabaseError as exc:
            raise TraceError(f"{path} is a damaged SQLite database ({exc}).") from None
        if not self.tables & set(EXPORT_TABLES):
            self.db.close()
            raise NotATraceError(f"{path} is a SQLite database but not an Nsight Systems export "
                                 "(it has no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS table).")

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        """The columns of ``table`` (PRAGMA table_info), empty when the table is absent."""
        if table not in self.tables:
            return set()
        if table not in self._columns:
            self._columns[table] = {row[1] for row in self.db.execute(
                f'PRAGMA table_info("{table}")')}
        return self._columns[table]

    def source(self, table: str) -> str:
        """SQL for the rows of ``table`` the readers read (``rowids``)."""
        if self.rowids is None:
            return f'"{table}"'
        return f'"{table}" WHERE rowid >= {int(self.rowids[0])} AND rowid < {int(self.rowids[1])}'

    def row_count(self, table: str) -> tuple[int, int, int]:
        """(rows, lowest rowid, highest rowid) of ``table``; zeros when it is absent."""
        if not self.has(table):
            return 0, 0, 0
        rows = next(self.query(f'SELECT count(*), min(rowid), max(rowid) FROM "{table}"'))[0]
        return (int(rows[0]), int(rows[1] or 0), int(rows[2] or 0))

    def require(self, table: str, *names: str) -> None:
        """A TraceError unless ``table`` has every column of ``names``."""
        missing = [n for n in names if n not in self.columns(table)]
        if missing:
            raise TraceError(f"{self.path}: its {table} table has no {', '.join(missing)} "
                             "column: an export schema this reader does not know.")

    def pick(self, table: str, *names: str, default: str = "-1") -> str:
        """SQL for the first of ``names`` that ``table`` has (NULL read as ``default``)."""
        present = self.columns(table)
        for name in names:
            if name in present:
                return f'COALESCE("{name}", {default})'
        return default

    def query(self, sql: str) -> Iterator[list[tuple]]:
        """The rows of ``sql`` in pieces of FETCH_ROWS; a damaged file is a TraceError."""
        try:
            cursor = self.db.execute(sql)
            while rows := cursor.fetchmany(FETCH_ROWS):
                yield rows
        except sqlite3.DatabaseError as exc:
            raise TraceError(f"{self.path} cannot be read as an Nsight Systems export "
                             f"({exc}); is the file damaged?") from None

    def run(self, sql: str) -> None:
        """A statement without rows (the temporary tables of this connection)."""
        for _ in self.query(sql):
            pass

    def int_columns(self, sql: str, width: int) -> np.ndarray:
        """An int64 matrix (rows x ``width``) of a query whose values are all integers."""
        return self.fetch(sql, "i" * width)[0]

    def fetch(self, sql: str, spec: str) -> tuple[np.ndarray, list[Texts]]:
        """A query's columns: ``spec`` has a letter per column, ``i`` an integer, ``t`` a text,
        ``n`` an NVTX range's text (two ``Texts``: its ``nvtx_key``). The integer columns as
        one int64 matrix (rows x their number), and each text column as ``Texts``. Read by the compiled reader where it runs here (no Python object per row),
        else through the sqlite3 module, into the same arrays."""
        try:
            compiled = self._fetch_compiled(sql, spec)
            ints, texts = compiled if compiled is not None else self._fetch_python(sql, spec)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TraceError(f"{self.path} holds a value that is not a whole number where nsys "
                             f"2026's exports have one ({exc}): an export schema this reader "
                             "does not know.") from None
        width = spec.count("i")
        return (ints.reshape(-1, width) if width else ints.reshape(0, 0)), texts

    def _fetch_compiled(self, sql: str, spec: str) -> tuple[np.ndarray, list[Texts]] | None:
        """``fetch`` by trace/nsys/_rows.c; None where it is not built, turned off
        (``TRAINPROF_PURE_PYTHON=1``) or cannot reach the SQLite library."""
        if _ROWS is None or os.environ.get("TRAINPROF_PURE_PYTHON", "") not in ("", "0"):
            return None
        import _sqlite3  # the module whose SQLite library _rows.c uses

        try:
            ints, texts = _ROWS.fetch(_sqlite3.__file__, self.uri, sql, spec)
        except OSError:
            return None
        except RuntimeError as exc:
            raise TraceError(f"{self.path} cannot be read as an Nsight Systems export "
                             f"({exc}); is the file damaged?") from None
        return (np.frombuffer(ints, np.int64),
                [(np.frombuffer(codes, np.int32), values) for codes, values in texts])

    def _fetch_python(self, sql: str, spec: str) -> tuple[np.ndarray, list[Texts]]:
        """``fetch`` through the sqlite3 module: the integers by ``np.fromiter`` per piece,
        each text column's values interned in the order they first appear (an NVTX text
        whole, then cut once per distinct text)."""
        at_int = [i for i, c in enumerate(spec) if c == "i"]
        at_text = [i for i, c in enumerate(spec) if c != "i"]
        texts = [_Interned() for _ in at_text]
        pieces: list[np.ndarray] = []
        for rows in self.query(sql):
            if len(at_int) == len(spec):
                flat = chain.from_iterable(rows)
            else:
                flat = chain.from_iterable([r[i] for i in at_int] for r in rows)
            pieces.append(np.fromiter(flat, dtype=np.int64, count=len(rows) * len(at_int)))
            for interned, col in zip(texts, at_text, strict=True):
                interned.add([r[col] for r in rows], spec[col] == "n")
        ints = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
        out: list[Texts] = []
        for interned, col in zip(texts, at_text, strict=True):
            out += interned.cut() if spec[col] == "n" else [interned.texts()]
        return ints, out

    @cached_property
    def strings(self) -> dict[int, str]:
        """``StringIds``: id -> text."""
        if not self.has("StringIds"):
            return {}
        return {i: str(v) for rows in self.query("SELECT id, value FROM StringIds")
                for i, v in rows}

    def enum(self, table: str, default: dict[int, str]) -> dict[int, str]:
        """An ``ENUM_*`` table as id -> name, or ``default`` where the export lacks it."""
        if not {"id", "name"} <= self.columns(table):
            return default
        return {int(i): str(n) for rows in self.query(f'SELECT id, name FROM "{table}"')
                for i, n in rows}

    @cached_property
    def meta(self) -> dict[str, str]:
        """``META_DATA_EXPORT`` (product version, schema version ...)."""
        if not {"name", "value"} <= self.columns("META_DATA_EXPORT"):
            return {}
        return {str(n): str(v) for rows in self.query("SELECT name, value FROM META_DATA_EXPORT")
                for n, v in rows}

    def schema_note(self) -> str | None:
        """A note when the export's schema version is not one these readers know."""
        version = self.meta.get("EXPORT_SCHEMA_VERSION")
        if version is None:
            return "The export records no schema version; read as nsys 2026's (3.x)."
        major = version.split(".", 1)[0]
        if major != str(KNOWN_SCHEMA_MAJOR):
            return (f"Export schema {version} is not the {KNOWN_SCHEMA_MAJOR}.x this reader "
                    "knows; tables were read by the columns they have.")
        return None


class _Interned:
    """A text column read through the sqlite3 module, interned as ``_rows.c`` interns it."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.codes: list[int] = []

    def add(self, values: Sequence[str | None], nvtx: bool = False) -> None:
        seen = self.index
        if nvtx:  # NULL is "" (``nvtx_key``)
            self.codes += [seen.setdefault(v or "", len(seen)) for v in values]
        else:
            self.codes += [-1 if v is None else seen.setdefault(v, len(seen)) for v in values]

    def texts(self) -> Texts:
        return np.array(self.codes, dtype=np.int32), list(self.index)

    def cut(self) -> list[Texts]:
        """An NVTX text column as the (key, sizes) columns of ``nvtx_key``: each distinct text
        cut once, in the order the texts first appear (so the keys and sizes are too)."""
        key, sizes = _Interned(), _Interned()
        cuts = [nvtx_key(t) for t in self.index]
        key.add([k for k, _ in cuts])
        sizes.add([z for _, z in cuts])
        codes = np.array(self.codes, dtype=np.int64)
        key_codes, size_codes = (np.array(c.codes, dtype=np.int32) for c in (key, sizes))
        return [(key_codes[codes], list(key.index)), (size_codes[codes], list(sizes.index))]
