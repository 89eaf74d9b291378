"""Big event arrays are decoded in chunks; the numbers must not change."""

from __future__ import annotations

import json

import pytest

import trainprof
from trainprof.trace import stream
from trainprof.trace.load import load_file

from helpers.paths import BERT, BIG_TRACE


def result(path):
    data = trainprof.analyze(path).to_dict()["ranks"][0]
    data.pop("file")
    return flat(data)


def flat(value, prefix=""):
    """Nested dicts and lists as {path: leaf}, floats rounded to 9 significant digits (the
    time origin of a chunked read differs, which moves the last bits)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}/{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{prefix}/{i}").items()}
    if isinstance(value, float):
        return {prefix: float(f"{value:.9g}")}
    return {prefix: value}


@pytest.mark.parametrize("trace", [BIG_TRACE, BERT], ids=["pretty", "minified"])
def test_chunked_equals_whole(trace, monkeypatch):
    whole = result(trace)
    whole_events = len(load_file(trace).events)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 16 * 1024)
    assert result(trace) == whole
    assert len(load_file(trace).events) == whole_events


def test_boundary_inside_a_nested_object_falls_back_to_whole(tmp_path, monkeypatch, builder):
    builder.step(1, 0, 100)
    for i in range(200):
        ev = builder.op(f"op{i}", i * 0.5, 0.5)
        ev["args"]["nested"] = [{"a": i}, {"b": i}]
    doc = builder.document()
    # Kineto-like layout: one event per block, and nested lists of objects over several lines.
    text = json.dumps(doc, indent=2)
    assert "},\n" in text
    path = tmp_path / "t.json"
    path.write_text(text)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 1024)
    rank = trainprof.analyze(path).ranks[0]
    assert rank.breakdown_pct["cpu_exec"] == pytest.approx(100)
    assert len(load_file(path).events) == 201


def test_corrupt_middle_is_an_error_not_a_retry_storm(tmp_path, monkeypatch, builder):
    builder.step(1, 0, 100)
    for i in range(300):
        builder.op(f"op{i}", i * 0.3, 0.3)
    text = json.dumps(builder.document(), indent=2)
    middle = len(text) // 2
    broken = text[:middle] + "@@" + text[middle:]
    path = tmp_path / "broken.json"
    path.write_text(broken)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(stream, "BLOCK_BYTES", 512)
    with pytest.raises(trainprof.TraceError, match="not valid JSON"):
        trainprof.analyze(path)
