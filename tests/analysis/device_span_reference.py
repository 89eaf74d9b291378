"""An independent reading of the device span's idle share, written from the trace JSON alone.

It shares no code with trainprof: the file is decoded with the standard library, the window is
the ProfilerStep ranges as recorded (or every event when there are none), and the busy time is a
plain sorted sweep over the kernel, memcpy and memset events launched inside that window (HTA's
rule: the launch call with the same correlation id lies in a recorded step), or, for a device
event with no correlation id, starting inside it.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

_DEVICE_CATEGORIES = {"kernel", "memcpy", "gpu_memcpy", "memset", "gpu_memset"}
_LAUNCH_CATEGORIES = {"runtime", "cuda_runtime", "cuda_driver"}
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _cat(e: dict) -> str:
    return str(e.get("cat", "")).lower()


def _window(events: list[dict], steps: set[int] | None) -> tuple[float, float]:
    """First start to last end of the ProfilerSteps numbered ``steps`` (all when None), or of
    every event when there are none."""
    found = [e for e in events if _cat(e) in ("cpu_op", "operator", "user_annotation")
             and (m := _STEP.match(str(e.get("name", "")))) and (steps is None
                                                                 or int(m.group(1)) in steps)]
    bounds = found or events
    return (min(float(e["ts"]) for e in bounds),
            max(float(e["ts"]) + float(e.get("dur", 0)) for e in bounds))


def device_span(path: Path, steps: set[int] | None = None,
                window: tuple[float, float] | None = None) -> tuple[float, float]:
    """(span in µs, idle % of it): from the first start to the last end of the device events
    launched inside the recorded steps numbered ``steps`` (every ProfilerStep when None), or
    inside ``window`` (the file's own µs) when given."""
    events = _events(path)
    start, end = window or _window(events, steps)
    launched = {e["args"]["correlation"]: float(e["ts"]) for e in events
                if _cat(e) in _LAUNCH_CATEGORIES and "correlation" in (e.get("args") or {})}
    spans = []
    for e in events:
        if _cat(e) not in _DEVICE_CATEGORIES:
            continue
        corr = (e.get("args") or {}).get("correlation")
        when = float(e["ts"]) if corr is None else launched.get(corr)
        if when is not None and start <= when < end:
            spans.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    spans.sort()
    busy, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for s, t in spans[1:]:
        if s > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = s, t
        else:
            cur_end = max(cur_end, t)
    busy += cur_end - cur_start
    span = max(t for _, t in spans) - spans[0][0]
    return span, (span - busy) / span * 100.0
