"""Structured mutations of real traces, for the fuzz suite: each takes a small real trace (its
JSON text) and a seeded ``random.Random`` and returns damaged bytes, the kind of damage a trace
meets in the wild (cut downloads, odd exporters, hostile names)."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Events kept from each shared trace for the corpus: enough for steps, kernels, flows and
#: memory events to appear, small enough for thousands of cases a minute.
EVENTS_KEPT = 120


def small_trace(path: Path, keep: int = EVENTS_KEPT) -> dict[str, Any]:
    """The trace's metadata and a window of its events (those of one ProfilerStep where there
    is one, else the first ``keep``), as a valid trace of its own."""
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = data.get("traceEvents", [])
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
             and e.get("ph") == "X"]
    if steps:
        first = steps[0]
        lo, hi = first["ts"], first["ts"] + first.get("dur", 0)
        inside = [e for e in events if isinstance(e.get("ts"), int | float) and lo <= e["ts"] <= hi]
        picked = [first] + random.Random(0).sample(inside, min(keep, len(inside)))
    else:
        picked = events[:keep]
    meta = [e for e in events if e.get("ph") == "M"][:20]
    return {**{k: v for k, v in data.items() if k != "traceEvents"},
            "traceEvents": meta + picked}


def _dumps(data: Any) -> bytes:
    return json.dumps(data, allow_nan=True).encode()


def _some_event(data: dict, rng: random.Random) -> dict:
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    return rng.choice(events) if events else {}


def cut(text: bytes, rng: random.Random) -> bytes:
    """A download or write that stopped part-way."""
    return text[: rng.randrange(0, len(text))]


def nest(data: dict, rng: random.Random) -> bytes:
    """An args value nested hundreds to thousands of levels deep."""
    depth = rng.choice([50, 600, 1_100, 5_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    event = _some_event(data, rng)
    event.setdefault("args", {})["deep"] = "__DEEP__"
    key = rng.choice(["args", "top"])
    if key == "top":
        data["__deep_top__"] = "__DEEP__"
    text = _dumps(data)
    deep = (opener * depth + "1" + closer * depth).encode()
    return text.replace(b'"__DEEP__"', deep)


_SWAPS: list[Any] = [None, True, "text", -1, 0, 1e308, -1e308, [], {}, [1, 2], "", 2**70]


def swap_types(data: dict, rng: random.Random) -> bytes:
    """A field of some events given another JSON type."""
    for _ in range(rng.randint(1, 5)):
        event = _some_event(data, rng)
        if not event:
            break
        args = event.get("args")
        field = rng.choice(["ts", "dur", "name", "cat", "ph", "pid", "tid", "args", "id"]
                           + [f"args.{k}" for k in (args if isinstance(args, dict) else ())])
        value = rng.choice(_SWAPS)
        if field.startswith("args.") and isinstance(event.get("args"), dict):
            event["args"][field[5:]] = value
        else:
            event[field] = value
    if rng.random() < 0.1:
        data[rng.choice(["traceEvents", "deviceProperties", "distributedInfo"])] = rng.choice(_SWAPS)
    return _dumps(data)


def inflate(data: dict, rng: random.Random) -> bytes:
    """One long string in a name or an argument (up to a few MB)."""
    event = _some_event(data, rng)
    size = rng.choice([10_000, 300_000, 3_000_000])
    piece = rng.choice(['x', '"', '\\', '{', ']', 'é', '\u202e'])
    target = rng.choice(["name", "args"])
    if target == "name":
        event["name"] = piece * size
    else:
        event.setdefault("args", {})
        if isinstance(event["args"], dict):
            event["args"]["blob"] = piece * size
    return _dumps(data)


def duplicate_keys(text: bytes, rng: random.Random) -> bytes:
    """A key written twice in one object (the last one wins in most readers)."""
    key = rng.choice([b'"ts": ', b'"dur": ', b'"name": ', b'"ph": ', b'"args": '])
    spots = [i for i in range(len(text)) if text.startswith(key, i)][:200]
    if not spots:
        return text
    at = rng.choice(spots)
    extra = rng.choice([b'"ts": 5, ', b'"dur": -3, ', b'"name": null, ', b'"ph": "B", ', b'"args": [], '])
    return text[:at] + extra + text[at:]


def invalid_utf8(text: bytes, rng: random.Random) -> bytes:
    """Bytes that are not UTF-8 inside a string or between tokens."""
    out = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(len(out))] = rng.choice([0xFF, 0xC3, 0x80, 0xED, 0x00])
    return bytes(out)


def nan_literals(text: bytes, rng: random.Random) -> bytes:
    """NaN and Infinity where numbers stand (Python's json writes them)."""
    words = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-0"]
    for key in (b'"ts": ', b'"dur": '):
        spots = [i for i in range(len(text)) if text.startswith(key, i)][:100]
        if spots and rng.random() < 0.7:
            at = rng.choice(spots) + len(key)
            end = at
            while end < len(text) and text[end:end + 1] in b"0123456789.-e+E":
                end += 1
            text = text[:at] + rng.choice(words) + text[end:]
    return text


def flip_bytes(text: bytes, rng: random.Random) -> bytes:
    """Random bytes overwritten: what a bad disk or a bad copy leaves."""
    out = bytearray(text)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def not_a_trace(text: bytes, rng: random.Random) -> bytes:
    """Valid JSON that is no trace at all."""
    return rng.choice([b"42", b"null", b'"text"', b"[]", b"[1, 2]", b"{}", b'{"traceEvents": 5}',
                       b'{"traceEvents": [1, "a", null]}', b"true", b'{"a": {"traceEvents": []}}'])


ON_TEXT: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "cut": cut, "duplicate_keys": duplicate_keys, "invalid_utf8": invalid_utf8,
    "nan_literals": nan_literals, "flip_bytes": flip_bytes, "not_a_trace": not_a_trace}
ON_DATA: dict[str, Callable[[dict, random.Random], bytes]] = {
    "nest": nest, "swap_types": swap_types, "inflate": inflate}
KINDS = sorted([*ON_TEXT, *ON_DATA])


def mutate(base: dict, kind: str, rng: random.Random) -> bytes:
    """One damaged copy of ``base`` (left unchanged)."""
    data = json.loads(json.dumps(base))
    if kind in ON_DATA:
        return ON_DATA[kind](data, rng)
    return ON_TEXT[kind](_dumps(data), rng)
