"""Reference readings of trace files with plain json, independent of trainprof's decoder."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path


def raw_events(path: Path) -> list[dict]:
    """The complete (``ph: X``) events of a trace file, as the JSON has them."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def t0_of(events: list[dict]) -> float:
    """The start trainprof measures times from: the first event's start, rounded down."""
    return float(math.floor(min(e["ts"] for e in events)))


def of_category(events: list[dict], *categories: str) -> list[dict]:
    wanted = {c.lower() for c in categories}
    return [e for e in events if str(e.get("cat", "")).lower() in wanted]
