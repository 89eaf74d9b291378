"""An independent reading of the device span's idle share, written from the trace JSON alone.

It shares no code with trainprof: the file is decoded with the standard library, the step window
is the ProfilerStep ranges (or every event when there are none), and the busy time is a plain
sorted sweep over the kernel, memcpy and memset events that start inside that window.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

_DEVICE_CATEGORIES = {"kernel", "memcpy", "gpu_memcpy", "memset", "gpu_memset"}
_STEP = re.compile(r"^ProfilerStep#\d+$")


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def device_span_idle_pct(path: Path, window: tuple[float, float] | None = None) -> float:
    """Idle % of [first start, last end) of the device events that start inside the window.

    ``window`` is (start, end) in the file's own µs; by default the ProfilerStep ranges, or every
    event when there are none.
    """
    events = _events(path)
    if window is None:
        steps = [e for e in events if _STEP.match(str(e.get("name", "")))
                 and str(e.get("cat", "")).lower() in ("cpu_op", "operator", "user_annotation")]
        bounds = steps or events
        window = (min(float(e["ts"]) for e in bounds),
                  max(float(e["ts"]) + float(e.get("dur", 0)) for e in bounds))
    start, end = window
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if str(e.get("cat", "")).lower() in _DEVICE_CATEGORIES and start <= float(e["ts"]) < end
    )
    busy, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for s, t in spans[1:]:
        if s > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = s, t
        else:
            cur_end = max(cur_end, t)
    busy += cur_end - cur_start
    span = max(t for _, t in spans) - spans[0][0]
    return (span - busy) / span * 100.0
