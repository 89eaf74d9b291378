"""The compiled scanner (trace/_scan.c) gives exactly what msgspec and ColumnBuilder.add give.

Every trace is loaded twice in the same process: with the scanner, and with
``TRAINPROF_PURE_PYTHON=1`` (msgspec alone); columns, tables, threads, time origin, notes and
metadata must be identical, and a file one way refuses, the other refuses with the same words.
The extension must be built here (``make setup`` builds it): a missing build fails, so that CI
always tests it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from invariants.strategies import job, write_job
from trainprof.errors import TraceError
from trainprof.structs import fields
from trainprof.trace import scan, stream
from trainprof.trace.load import load_file

from helpers.paths import BERT, BIG_TRACE, SHARED_TRACE_FILES

RESNET = next(p for p in SHARED_TRACE_FILES if p.name == "resnet_kineto.json.gz")


def assert_same(a: Any, b: Any, where: str = "trace") -> None:
    """Equal values of equal types; arrays with equal dtypes (NaNs equal)."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
        if a.dtype.kind == "f":  # -0.0 and 0.0 are equal above, but are not the same reading
            assert np.array_equal(np.signbit(a), np.signbit(b)), where
    elif isinstance(a, msgspec.Struct):
        for f in fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, (where, a, b)


_COMPARED = ("events", "memory", "flows", "threads", "t0_us", "metadata", "notes")


def load_both(path: Path, monkeypatch: pytest.MonkeyPatch, workers: int = 1
              ) -> tuple[Any, Any, dict[str, int]]:
    """(outcome with msgspec alone, outcome with the scanner, the scanner's counts); an
    outcome is the trace's compared fields, or the error's words."""
    outcomes = []
    for pure in ("1", "0"):
        monkeypatch.setenv("TRAINPROF_PURE_PYTHON", pure)
        scan.SCAN_STATS.clear()
        try:
            trace = load_file(path, workers=workers)
        except TraceError as exc:
            outcomes.append(f"TraceError: {exc}")
        except (ValueError, TypeError) as exc:  # a crash on odd input must at least be the same
            outcomes.append(f"{type(exc).__name__}: {exc}")
        else:
            outcomes.append({name: getattr(trace, name) for name in _COMPARED})
    return outcomes[0], outcomes[1], dict(scan.SCAN_STATS)


def test_the_extension_is_built_and_current(monkeypatch):
    monkeypatch.delenv("TRAINPROF_PURE_PYTHON", raising=False)
    from trainprof.trace import _scan  # an ImportError here: run `make setup`

    assert _scan.VERSION == scan.SCAN_VERSION
    assert scan.available()
    monkeypatch.setenv("TRAINPROF_PURE_PYTHON", "1")
    assert not scan.available()


def test_a_build_of_another_layout_is_not_used(monkeypatch):
    assert scan._load() is not None
    monkeypatch.setattr(scan, "SCAN_VERSION", scan.SCAN_VERSION + 1)
    assert scan._load() is None  # a stale build: every piece takes the msgspec path


@pytest.mark.parametrize("path", SHARED_TRACE_FILES, ids=lambda p: p.name)
def test_every_shared_trace_reads_the_same(path, monkeypatch):
    pure, scanned, stats = load_both(path, monkeypatch)
    assert_same(pure, scanned)
    assert stats.get("accepted", 0) > 0


@pytest.mark.parametrize("path", [BIG_TRACE, RESNET, BERT], ids=lambda p: p.name)
def test_real_traces_are_mostly_scanned(path, monkeypatch):
    _, _, stats = load_both(path, monkeypatch)
    pieces = stats.get("accepted", 0) + stats.get("refused", 0)
    assert pieces >= 1
    assert stats.get("accepted", 0) / pieces >= 0.9
    assert stats.get("redecoded", 0) == 0


def test_parallel_read_with_the_scanner_is_the_serial_read(monkeypatch):
    pure, _, _ = load_both(BIG_TRACE, monkeypatch)
    _, parallel, _ = load_both(BIG_TRACE, monkeypatch, workers=2)
    assert_same(pure, parallel)


# -- what the scanner refuses, piece by piece ---------------------------------------------------

@pytest.mark.parametrize("piece", [
    b'[{"ph": "X", "ph": "X"}]',  # a duplicate key (msgspec keeps the last)
    b'[{"args": {"correlation": 1, "correlation": 2}}]',
    b'[{"p\\u0068": "X"}]',  # an escaped key (msgspec unescapes it)
    b'[{"id": 1.0}]',  # a float where an id is expected
    b'[{"id": "7"}]',
    b'[{"id": 9223372036854775808}]',  # past int64
    b'[{"id": -9223372036854775808}]',  # the integer that marks a missing id
    b'[{"zz": 123456789012345678901234567890}]',  # past int64, even where it is skipped
    b'[{"zz": 1e400}]', b'[{"zz": 1e-400}]',  # overflow, underflow
    b'[{"ts": "5"}]', b'[{"ts": true}]', b'[{"dur": [1]}]',  # a time that is not a number
    b'[{"args": {"flops": "5"}}]',  # a number field holding text
    b'[{"args": [1]}]', b'[{"args": 3}]',  # args neither an object nor null
    b'[{"ph": "X"}, 5]', b'[[1]]',  # an entry that is not an event
    b'[{"name": "\\ud800"}]', b'[{"name": "\\udc00x"}]',  # lone surrogates
    b'[{"name": "\xff"}]', b'[{"name": "\xc0\xaf"}]', b'[{"name": "\xed\xa0\x80"}]',  # UTF-8
    b'[{"name": "a\x01"}]',  # a raw control character
    b'[{"name": "a\\q"}]', b'[{"name": "a\\u12g4"}]',  # bad escapes
    b'[{"name": "ab}]', b'[{"ph": "X"}', b'[{"ph": "X"},]', b'[{"ph" "X"}]',  # not JSON
    b'[{"zz": 01}]', b'[{"zz": 1.}]', b'[{"zz": .5}]', b'[{"zz": +1}]', b'[{"zz": NaN}]',
    b'[{"zz": tru}]', b'[{"ts": 1}\x0c]',
    b'[{"zz": ' + b"[" * 70 + b"]" * 70 + b"}]",  # nested too deep
])
def test_the_scanner_refuses(piece):
    assert scan._SCANNER is not None
    assert scan._SCANNER.scan(piece) is None


@pytest.mark.parametrize("piece", [
    b'[]', b' [ ] ', b'[{}]', b'[{"args": null}]', b'[{"args": {}}]',
    b'[{"name": "caf\\u00e9 \\"q\\" \\ud83d\\ude00 \xc3\xa9 \xf0\x9f\x98\x80"}]',
    b'[{"zz": {"a": [1, -0.5e-3, true, false, null, "x"]}, "ts": -0, "dur": 1E2}]',
    b'[{"id": -9223372036854775807, "args": {"External id": 9223372036854775807}}]',
])
def test_the_scanner_accepts(piece):
    scanned = scan.scan_piece(piece)
    assert scanned is not None
    events = json.loads(piece)
    assert len(scanned) == len(events)
    for row, event in enumerate(events):  # names (escapes, non-ASCII) decode as json does
        code = scanned.spans[row, scan.NAME]
        assert (scanned.values()[code] if code >= 0 else None) == event.get("name")


def test_numbers_are_read_exactly():
    """Times and numbers against Python's own float() (correctly rounded)."""
    texts = ["0", "-0", "-0.0", "1", "0.1", "123456789.123456", "1695835535123.4567",
             "9007199254740993", "-9223372036854775807", "1.7976931348623157e308",
             "2.2250738585072014e-308", "4.9406564584124654e-300", "0.30000000000000004",
             "1e22", "1e23", "123456789012345678e-5", "8.98846567431158e307", "3.14159e-10"]
    piece = ("[" + ",".join(f'{{"ts": {t}, "args": {{"flops": {t}}}}}' for t in texts)
             + "]").encode()
    scanned = scan.scan_piece(piece)
    assert scanned is not None
    expected = np.array([float(t) if "." in t or "e" in t else float(int(t)) for t in texts])
    for column in (scan.TS, scan.FLOPS):
        got = scanned.numbers[:, column]
        assert np.array_equal(got, expected)
        assert np.array_equal(np.signbit(got), np.signbit(expected))


# -- generated traces, nasty values included ----------------------------------------------------

_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "zz"]
_ARGS_KEYS = ["External id", "external id", "correlation", "device", "stream", "blocks per SM",
              "est. achieved occupancy %", "bytes", "Device Type", "Device Id", "Bytes",
              "Total Allocated", "Total Reserved", "Addr", "Input Dims", "Input type",
              "Concrete Inputs", "Call stack", "flops", "grid", "block", "registers per thread",
              "shared memory", "Collective name", "In msg nelems", "Out msg nelems",
              "Group size", "dtype", "Process Group Name", "Process Group Ranks", "other"]


def _text(value: str, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


_STRINGS = st.builds(_text, st.one_of(
    st.sampled_from(["X", "i", "I", "s", "f", "t", "M", "", "[memory]", "kernel", "cpu_op",
                     "gpu_memcpy", "cuda_runtime", "fwdbwd", "ac2g", "nccl:all_reduce",
                     "ncclDevKernel_AllReduce", "7", "stream 7", "mtia:1", "12", "-3",
                     "aten::mm", "},{", "a\"b", "é", "\u0000"]),
    st.text(alphabet=st.sampled_from('ab "\\/}{,\n\té😀\u2028\x01'), max_size=6),
), st.booleans())
_INTEGERS = st.one_of(st.integers(-3, 40), st.integers(-2**64, 2**64),
                      st.sampled_from([2**62, 2**63 - 1, -2**63, 2**63]))
_FLOATS = st.floats(allow_nan=False, allow_infinity=False).map(repr)
_ODD_NUMBERS = st.sampled_from(["-0", "-0.0", "1e400", "1e-400", "1E2", "2.5e-320", "0.1",
                                "1.5", "-7.25", "1e5"])
_SCALARS = st.one_of(_STRINGS, st.integers(-3, 2**40).map(str), _FLOATS,
                     st.sampled_from(["null", "true", "false", "-0", "-0.0", "1E2", "0.1"]))
#: Values the scanner refuses (msgspec may accept them, or may not).
_ODD = st.one_of(_INTEGERS.map(str), _ODD_NUMBERS,
                 st.sampled_from(['"\\ud800"', '"a\\qb"', "01", "[1,]", "{", '"x']))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    st.lists(st.tuples(st.sampled_from(['"a"', '"b"', '"grid"']), inner), max_size=3).map(
        lambda kv: "{" + ",".join(f"{k}: {v}" for k, v in kv) + "}"),
), max_leaves=6)
_TIMES = st.one_of(st.integers(0, 5000).map(str), st.floats(0, 5000).map(repr),
                   st.sampled_from(["-3", "0.5", "-0"]))


_ANYTHING = st.one_of(_VALUES, _ODD)


def _mostly(plausible: st.SearchStrategy[str], odd: st.SearchStrategy[str] = _ANYTHING
            ) -> st.SearchStrategy[str]:
    """Usually a value of the type a trace holds there; one time in 40 anything at all, the
    values the scanner refuses included."""
    return st.integers(0, 39).flatmap(lambda i: odd if i == 0 else plausible)


_INTS = st.integers(-1, 60).map(str)
_NUMBERS = st.one_of(_INTS, st.floats(-1e6, 1e12).map(repr),
                     st.sampled_from(["-0", "-0.0", "1E2", "0.1", "1.5", "-7.25", "1e5", "null"]))
_ID_KEYS = {"External id", "external id", "correlation"}
_NUMBER_KEYS = {"blocks per SM", "est. achieved occupancy %", "bytes", "Device Type", "Device Id",
                "Bytes", "Total Allocated", "Total Reserved", "Addr", "flops"}


def _arg_value(key: str) -> st.SearchStrategy[str]:
    if key in _ID_KEYS:
        return _mostly(_INTS)
    if key in _NUMBER_KEYS:
        return _mostly(_NUMBERS)
    return _mostly(_VALUES)


def _event_value(key: str) -> st.SearchStrategy[str]:
    if key == "ph":
        return _mostly(st.sampled_from(['"X"', '"X"', '"X"', '"i"', '"I"', '"s"', '"f"', '"t"',
                                        '"M"']))
    if key in ("ts", "dur"):
        return _mostly(_TIMES)
    if key in ("id", "pid", "tid"):
        return _mostly(st.one_of(_INTS, st.sampled_from(['"7"', '"stream 3"', '"mtia:1"'])))
    if key == "args":
        return _mostly(_members(_ARGS_KEYS, _arg_value, 8),
                       st.sampled_from(["null", "[1]", "3", '"x"']))
    if key in ("cat", "name"):
        return _mostly(_STRINGS)
    return _mostly(_VALUES)


@st.composite
def _members(draw: st.DrawFn, keys: list[str], value_of: Any, n: int) -> str:
    """An object's text: keys drawn from ``keys`` (rarely one twice), values from
    ``value_of(key)``."""
    chosen = draw(st.lists(st.sampled_from(keys), max_size=n, unique=draw(st.integers(0, 39)) > 0))
    return "{" + ", ".join(f"{json.dumps(k)}: {draw(value_of(k))}" for k in chosen) + "}"


@st.composite
def _event(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 80)) == 0:
        return draw(_SCALARS)  # an entry that is not an event
    body = draw(_members(_KEYS, _event_value, 9))
    if draw(st.integers(0, 9)) < 7:  # a complete event for sure (keys that follow may repeat these)
        return '{"ph": "X", "ts": ' + str(draw(st.integers(0, 5000))) + (
            ", " + body[1:] if body != "{}" else "}")
    return body


@st.composite
def _document(draw: st.DrawFn) -> bytes:
    events = draw(st.lists(_event(), min_size=1, max_size=25))
    sep = draw(st.sampled_from([",", ", ", ",\n  "]))
    text = '{"schemaVersion": 1, "traceEvents": [' + sep.join(events) + "]}"
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 30)) == 0:
        data = data.replace(b"\xc3\xa9", b"\xff", 1)  # invalid UTF-8
    return data


@settings(max_examples=200, deadline=None, database=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],  # shrinking such documents takes minutes
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(_document(), st.sampled_from([64, 256, 1 << 20]))
def test_generated_traces_read_the_same(tmp_path, monkeypatch, data, chunk):
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    path = tmp_path / "t.json"
    path.write_bytes(data)
    pure, scanned, _ = load_both(path, monkeypatch)
    assert_same(pure, scanned)


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(job(), st.sampled_from([2048, 1 << 20]))
def test_generated_jobs_read_the_same(tmp_path_factory, monkeypatch, builders, chunk):
    """The invariants suite's realistic jobs (kernels, copies, memory events, flows,
    collectives, several ranks) read the same. (Most of their pieces are scanned: 536 of 542
    in one run of 150 jobs; some jobs hold odd values on purpose, such as ids as text.)"""
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    root = write_job(builders, tmp_path_factory.mktemp("job") / "job")
    for path in [root] if root.is_file() else sorted(root.rglob("*.json*")):
        pure, scanned, _ = load_both(path, monkeypatch)
        assert_same(pure, scanned)


def test_generated_traces_are_often_scanned(tmp_path, monkeypatch):
    """The test above compares the scanner's columns, not only its refusals: most of these
    events are ones it accepts."""
    events = [f'{{"ph": "X", "cat": "cpu_op", "name": "op{i % 7}", "pid": 1, "tid": "{i % 3}", '
              f'"ts": {i}.5, "dur": 1, "args": {{"External id": {i}, '
              f'"Input Dims": [[{i % 4}]], "Call stack": "a\\nb"}}}}' for i in range(300)]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + ", ".join(events) + "]}")
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    pure, scanned, stats = load_both(path, monkeypatch)
    assert_same(pure, scanned)
    assert stats["accepted"] > 5 and stats.get("refused", 0) == 0


# -- pieces cut in place (scan_range) -----------------------------------------------------------

def _pieces(path: Path, in_place: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each chunk of the trace as (its text, whether the scanner cut it in place), or the number
    of events of a chunk decoded by msgspec."""
    with monkeypatch.context() as patch:
        patch.delenv("TRAINPROF_PURE_PYTHON", raising=False)
        if not in_place:
            patch.setattr(stream, "scan_range", lambda *args: None)
        return [(chunk.text(), chunk.span is not None) if isinstance(chunk, scan.ScannedPiece)
                else len(chunk) for chunk in stream.EventReader(path).chunks()]


@pytest.mark.parametrize("chunk", [4096, 1 << 20])
@pytest.mark.parametrize("path", [BIG_TRACE, BERT], ids=["pretty", "minified"])
def test_pieces_cut_in_place_are_the_pieces_found_by_searching(path, chunk, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    in_place = _pieces(path, True, monkeypatch)
    searched = _pieces(path, False, monkeypatch)
    assert [p[0] if isinstance(p, tuple) else p for p in in_place] == [
        p[0] if isinstance(p, tuple) else p for p in searched]
    cut_in_place = [p[1] for p in in_place if isinstance(p, tuple)]
    assert sum(cut_in_place) >= len(in_place) - 1  # all but the tail
    assert not any(p[1] for p in searched if isinstance(p, tuple))


def test_pieces_cut_in_place_keep_their_text_across_small_blocks(tmp_path, monkeypatch):
    """A piece's text is kept as the blocks it spans (here dozens of 64-byte blocks)."""
    events = [f'{{"ph": "X", "name": "op{i % 7}", "ts": {i}, "dur": 1, "args": {{"External id": '
              f'{i}, "Input Dims": [[{i % 4}]]}}}}' for i in range(400)]
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}")
    monkeypatch.setattr(stream, "BLOCK_BYTES", 64)
    monkeypatch.setattr(stream, "CUT_MARGIN", 256)
    for chunk in (300, 1024, 4096):
        monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
        in_place = _pieces(path, True, monkeypatch)
        searched = _pieces(path, False, monkeypatch)
        assert [p[0] for p in in_place] == [p[0] for p in searched]
        assert sum(p[1] for p in in_place) == len(in_place) - 1 > 3
        assert all(len(json.loads(p[0])) for p in in_place)


_RUN = b'[ {"ph": "X", "ts": 1},\n {"ph": "i", "ts": 2} , {"name": "a}, {b", "ts": 3},{"ts": 4}]'


@pytest.mark.parametrize(("cut_after", "expected_end"), [
    (0, b'{"ph": "X", "ts": 1}'),
    (21, b'{"ph": "X", "ts": 1}'),  # its closing brace is at 21
    (22, b'{"ph": "i", "ts": 2}'),
    (45, b'{"name": "a}, {b", "ts": 3}'),  # the "}, {" inside the string (59) is no cut
    (59, b'{"name": "a}, {b", "ts": 3}'),
])
def test_scan_range_cuts_after_the_first_event_closing_at_the_mark(cut_after, expected_end):
    assert scan._SCANNER is not None
    buffer = bytearray(_RUN)
    found = scan.scan_range(buffer, 1, cut_after)
    assert found is not None
    piece, next_start = found
    start, end = piece.span or (0, 0)
    assert (start, bytes(buffer[end - len(expected_end):end])) == (1, expected_end)
    assert buffer[next_start:next_start + 1] == b"{"
    assert buffer[end:next_start].strip(b" \n,") == b""
    events = json.loads(piece.text())
    assert [e["ts"] for e in events] == [e["ts"] for e in json.loads(_RUN)][:len(events)]
    assert piece.numbers[:, scan.TS].tolist() == [e["ts"] for e in events]
    assert scan.scan_piece(piece.text()) is not None
    assert scan.scan_piece(piece.text()).texts == piece.texts  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "cut_after"), [
    (_RUN, 75),  # the last event is followed by the array's end, not another event
    (_RUN[:60], 45),  # the buffer ends inside the event that closes past the mark
    (_RUN[:76], 45),  # ... or before the next event starts
    (b'[{"ts": 1}\x0c, {"ts": 2}]', 0),  # a separator that is not JSON whitespace
    (b'[{"ts": 1},\n]', 0),
    (b'[{"ph": "X", "ph": "X"}, {"ts": 2}]', 0),  # what scan() refuses
    (b'[5, {"ts": 2}]', 0),
])
def test_scan_range_refuses(text, cut_after):
    assert scan._SCANNER is not None
    assert scan.scan_range(bytearray(text), 1, cut_after) is None
