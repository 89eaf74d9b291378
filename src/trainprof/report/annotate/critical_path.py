"""The critical path as events ``trainprof annotate`` adds: each stretch of the path a complete
event (``ph: "X"``) on a track of its own, "critical path", in the process of the thread or GPU
it ran on, so that the viewer shows the path right under the work it follows."""

from __future__ import annotations

from typing import Any

from trainprof.report.annotate.events import CATEGORY, device_pids
from trainprof.trace.model import Trace

#: Most path events added to one trace (the longest stretches are kept).
MAX_PATH_EVENTS = 20_000


def _lane_pid(lane: str, trace: Trace, gpus: dict[int, Any]) -> tuple[Any, str] | None:
    """(pid, track name) of a lane ("host thread 123", "GPU 0 stream 7")."""
    words = lane.split()
    if words[0] == "host":
        tid = " ".join(words[2:])
        pid = next((p for p, t in trace.threads if str(t) == tid), None)
        return None if pid is None else (pid, f"critical path (thread {tid})")
    if words[0] == "GPU" and words[1].isdigit() and int(words[1]) in gpus:
        return gpus[int(words[1])], f"critical path (stream {words[-1]})"
    return None


def path_events(result: Any, trace: Trace, offset: float) -> list[dict[str, Any]]:
    """The path's stretches of every step (``CriticalPath``) as complete events."""
    steps = getattr(result, "steps", None) or []
    if not steps:
        return []
    share = max(1, MAX_PATH_EVENTS // len(steps))
    gpus = device_pids(trace)
    places: dict[str, tuple[Any, str] | None] = {}
    out = []
    for step in steps:
        for p in step.pieces.longest(share):
            if p.lane not in places:
                places[p.lane] = _lane_pid(p.lane, trace, gpus)
            place = places[p.lane]
            if place is None:
                continue
            out.append({"ph": "X", "cat": CATEGORY, "pid": place[0], "tid": place[1],
                        "name": p.name or p.category.replace("_", " "),
                        "ts": round(p.start_us + offset, 3),
                        "dur": round(p.end_us - p.start_us, 3),
                        "args": {"critical path": p.category, "step": step.step}})
    return out
