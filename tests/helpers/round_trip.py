"""A result written as JSON, read back into the typed records (analysis/decode.py) and written
again: the differences, part by part. Floats are compared to 1e-9 (a saved result's floats are
rounded to 12 digits, trainprof/tidy.py; a figure derived again from rounded fields may differ
in its last digit); everything else, key order included, exactly."""

from __future__ import annotations

import json
import math
from typing import Any

from trainprof.analysis.decode import analysis_from_dict
from trainprof.analysis.results import Analysis
from trainprof.report.json import to_json_bytes


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where the JSON values ``a`` and ``b`` differ (at most a few per list)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{path}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        same = math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return [] if same else [f"{path}: {a!r} != {b!r}"]
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r:.80} != {b!r:.80}"]
    return []


def round_trip(result: Analysis) -> tuple[dict[str, Any], dict[str, Any]]:
    """The result's JSON, and the JSON of the result read back from it."""
    first = json.loads(to_json_bytes(result))
    return first, json.loads(to_json_bytes(analysis_from_dict(first)))
