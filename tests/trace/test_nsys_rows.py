"""The compiled rows reader of nsys exports (trace/nsys/_rows.c) reads exactly what the sqlite3
module reads: the same traces from the three real exports, the same cut of NVTX texts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from trainprof import structs
from trainprof.trace.nsys import schema
from trainprof.trace.nsys.build import read_export
from trainprof.trace.nsys.schema import Export
from trainprof.trace.nsys.tables import distinct

from helpers.paths import NSYS_EXPORTS

needs_compiled = pytest.mark.skipif(schema._ROWS is None,
                                    reason="trace/nsys/_rows.c is not built: run `make setup`")


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    return a == b


@needs_compiled
@pytest.mark.parametrize("path", NSYS_EXPORTS, ids=lambda p: p.stem)
def test_compiled_and_python_reads_are_identical(path, monkeypatch):
    compiled = read_export(path)
    monkeypatch.setenv("TRAINPROF_PURE_PYTHON", "1")
    python = read_export(path)
    assert len(compiled) == len(python) > 0
    for c, p in zip(compiled, python, strict=True):
        for f in structs.fields(c.events):
            assert _same(getattr(c.events, f.name), getattr(p.events, f.name)), f.name
        assert (c.rank, c.threads, c.t0_us, c.metadata, c.notes) == \
            (p.rank, p.threads, p.t0_us, p.metadata, p.notes)


# torch's emit_nvtx names (torch/csrc/profiler/stubs/cuda.cpp, getNvtxStr) and other texts, with
# the (key, sizes) each must give: "T<op>" where a torch field follows the first ", ".
TEXTS = {
    "aten::mm, seq = 4, op_id = 99, sizes = [[2, 3], [3, 4]], input_op_ids = [(98, 0)]":
        ("Taten::mm", "[[2, 3], [3, 4]]"),
    "aten::view, op_id = 314290": ("Taten::view", None),
    "aten::add, sizes = [[1]]": ("Taten::add", "[[1]]"),
    "aten::add, seq = 1, sizes = , input_op_ids = []": ("Taten::add", ""),
    "ünïcode, op_id = 1, sizes = [[5]]": ("Tünïcode", "[[5]]"),
    "FSDP::pre_forward (layers.0), op_id = 7": ("TFSDP::pre_forward (layers.0)", None),
    "ProfilerStep#3": ("XProfilerStep#3", None),
    "a, b": ("Xa, b", None),
    "a, b, op_id = 3": ("Xa, b, op_id = 3", None),
    ", op_id = 3": ("X, op_id = 3", None),
    "": ("X", None),
    None: ("X", None),
}


@pytest.fixture(scope="module")
def texts_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nvtx") / "texts.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, text TEXT)")
        db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?)",
                       [(i, t) for i, t in enumerate([*TEXTS, *TEXTS])])
    return path


def _cut(path: Path) -> list[tuple[int, str, str | None]]:
    with Export(path) as db:
        m, ((key, keys), (size, sizes)) = db.fetch(
            "SELECT start, text FROM NVTX_EVENTS ORDER BY rowid", "in")
    return [(int(s), keys[k], sizes[z] if z >= 0 else None)
            for s, k, z in zip(m[:, 0], key, size, strict=True)]


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_nvtx_texts_are_cut_into_key_and_sizes(texts_db, pure, monkeypatch):
    if not pure and schema._ROWS is None:
        pytest.skip("trace/nsys/_rows.c is not built: run `make setup`")
    monkeypatch.setenv("TRAINPROF_PURE_PYTHON", "1" if pure else "0")
    expected = [(i, *cut) for i, cut in enumerate([*TEXTS.values(), *TEXTS.values()])]
    assert _cut(texts_db) == expected


@needs_compiled
def test_compiled_texts_are_interned_in_the_order_they_first_appear(texts_db):
    with Export(texts_db) as db:
        _, ((codes, values),) = db.fetch("SELECT start, text FROM NVTX_EVENTS ORDER BY rowid",
                                         "it")
    distinct_texts = [t for t in TEXTS if t is not None]
    assert values == distinct_texts
    assert codes.tolist() == [-1 if t is None else distinct_texts.index(t)
                              for t in [*TEXTS, *TEXTS]]


@needs_compiled
def test_a_text_where_an_integer_belongs_is_one_sentence(texts_db):
    from trainprof.errors import TraceError

    with Export(texts_db) as db, pytest.raises(TraceError, match="not a whole number"):
        db.fetch("SELECT text FROM NVTX_EVENTS", "i")


@pytest.mark.parametrize("values", [
    np.array([5, 3, 5, 9, 3, 0], np.int64),  # a small range: the table of the range
    np.array([-4, 7, -4, 2], np.int64),  # negative: sorted
    np.array([1 << 40, 3, 1 << 40], np.int64),  # a wide range: sorted
    np.array([[1, 2], [1, 2], [0, 5], [1, 3]], np.int64),  # rows
])
def test_distinct_is_numpys_unique(values):
    unique, inverse = distinct(values)
    assert np.array_equal(unique[inverse], values)
    if values.ndim == 1:  # a column: np.unique's own (sorted) answer
        expected, expected_inverse = np.unique(values, return_inverse=True)
        assert np.array_equal(unique, expected)
        assert np.array_equal(inverse, expected_inverse.reshape(-1))
    else:  # rows: each distinct row once, in some order
        assert sorted(map(tuple, unique.tolist())) == sorted(set(map(tuple, values.tolist())))


@needs_compiled
def test_without_sqlites_symbols_the_sqlite3_module_reads_the_same(tmp_path):
    # A Python whose sqlite3 module exports no sqlite3_* symbols (linked statically, hidden):
    # here, the rows reader pointed at a file that is no library. A fresh process, since the
    # reader keeps the library it found.
    import pickle
    import subprocess
    import sys

    code = (
        "import pickle, sys, _sqlite3\n"
        "from pathlib import Path\n"
        "_sqlite3.__file__ = sys.argv[2]\n"
        "from trainprof.trace.nsys import schema\n"
        "from trainprof.trace.nsys.build import read_export\n"
        "with schema.Export(Path(sys.argv[1])) as db:\n"
        "    assert db._fetch_compiled('SELECT 1', 'i') is None\n"
        "ev = read_export(Path(sys.argv[1]))[0].events\n"
        "sys.stdout.buffer.write(pickle.dumps((ev.ts, ev.name, ev.names, ev.shape)))\n")
    not_a_library = tmp_path / "not_a_library.so"
    not_a_library.write_text("")
    done = subprocess.run([sys.executable, "-c", code, str(NSYS_EXPORTS[0]), str(not_a_library)],
                          capture_output=True, check=True)
    ts, name, names, shape = pickle.loads(done.stdout)
    ev = read_export(NSYS_EXPORTS[0])[0].events
    assert np.array_equal(ts, ev.ts) and np.array_equal(name, ev.name)
    assert names == ev.names and np.array_equal(shape, ev.shape)
