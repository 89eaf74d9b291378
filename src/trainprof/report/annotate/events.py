"""The events ``trainprof annotate`` adds to a trace: counter tracks and the findings.

* ``GPU <n> utilisation``: the share of each time bucket in which a kernel ran on device n
  (``ph: "C"``, on the device's own process track). The bucket is the smallest power of ten
  microseconds that gives at most ``MAX_BUCKETS`` buckets over the trace, so a step shows its
  busy and idle stretches.
* ``Memory allocated <device>``: the memory section's (down-sampled) curve, in MB.
* One instant event (``ph: "i"``) per finding, on the rank's main thread (scope ``p``; ``g`` for
  job-wide findings), at the step it concerns: its extra ``step`` or ``at_ms`` when the
  rule gives one, else a "step N" in its evidence, else the start of the step window.

Times here are µs from ``Trace.t0_us``; ``to_file_ts`` turns them back into the file's ``ts``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.results import RankAnalysis
from trainprof.diagnose.findings import Finding, saving_phrase, shared_number
from trainprof.report.labels import evidence_text
from trainprof.trace.model import Kind, Trace, is_dataloader

MAX_BUCKETS = 1000
CATEGORY = "trainprof"
_STEP_IN_TEXT = re.compile(r"\bstep (\d+)\b")
_MB = 1e6


def file_ts_offset(trace: Trace) -> float:
    """What to add to a time of the columns to get the ``ts`` written in the file."""
    base_ns = trace.metadata.get("baseTimeNanoseconds")
    base_us = base_ns / 1000.0 if isinstance(base_ns, int | float) and base_ns else 0.0
    return trace.t0_us - base_us


def bucket_us(span_us: float) -> float:
    """The smallest power of ten (at least 1 µs) giving at most MAX_BUCKETS buckets."""
    if span_us <= MAX_BUCKETS:
        return 1.0
    return float(10 ** math.ceil(math.log10(span_us / MAX_BUCKETS)))


def main_thread(trace: Trace) -> tuple[Any, Any]:
    """(pid, tid) as in the file of the thread that ran the steps (or the most ops)."""
    ev = trace.events
    for kinds in ((Kind.STEP,), (Kind.CPU_OP, Kind.USER_ANNOTATION)):
        tids = ev.tid[ev.of_kind(*kinds)]
        if len(tids):
            return trace.threads[Counter(tids.tolist()).most_common(1)[0][0]]
    return trace.threads[0] if trace.threads else (0, 0)


def device_pids(trace: Trace) -> dict[int, Any]:
    """The file's pid of each device's kernels (its process track in the viewer)."""
    ev = trace.events
    out: dict[int, Any] = {}
    for device in trace.devices:
        first = np.flatnonzero((ev.kind == Kind.KERNEL) & (ev.device == device))
        if len(first):
            out[device] = trace.threads[int(ev.tid[first[0]])][0]
    return out


def utilization_counters(trace: Trace, offset: float) -> list[dict[str, Any]]:
    ev = trace.events
    pids = device_pids(trace)
    if not len(ev) or not pids:
        return []
    start, end = min(float(ev.ts.min()), 0.0), float(ev.end.max())
    size = bucket_us(end - start)
    edges = np.arange(start, end + size, size)
    out: list[dict[str, Any]] = []
    for device, pid in pids.items():
        mask = (ev.kind == Kind.KERNEL) & (ev.device == device)
        busy = iv.union(ev.ts[mask], ev.end[mask])
        pct = iv.covered_in_windows(busy, edges[:-1], edges[1:]) / size * 100.0
        name = f"GPU {device} utilisation"
        values = [*np.round(pct, 1).tolist(), 0.0]
        out += [{"ph": "C", "cat": CATEGORY, "name": name, "pid": pid,
                 "ts": round(float(t) + offset, 3), "args": {"%": v}}
                for t, v in zip(edges, values, strict=False)]
    return out


def memory_counters(trace: Trace, memory: Any, steps: StepWindows, offset: float,
                    host_pid: Any) -> list[dict[str, Any]]:
    """Counter events from the memory section's curves (``analysis.sections.memory.Memory``): a GPU's
    memory on that GPU's process track, host memory on the main process."""
    out: list[dict[str, Any]] = []
    start = steps.span[0]
    pids = device_pids(trace)
    for d in getattr(memory, "devices", []):
        index = d.device.removeprefix("cuda:")
        pid = pids.get(int(index), host_pid) if index.isdigit() else host_pid
        name = f"Memory allocated {d.device}" + ("" if d.has_totals else " (above trace start)")
        reserved = d.curve.reserved
        for i, (ms, allocated) in enumerate(zip(d.curve.ms, d.curve.allocated, strict=True)):
            args = {"MB": round(float(allocated) / _MB, 3)}
            if reserved is not None:
                args["reserved MB"] = round(float(reserved[i]) / _MB, 3)
            out.append({"ph": "C", "cat": CATEGORY, "name": name, "pid": pid,
                        "ts": round(start + float(ms) * 1000.0 + offset, 3), "args": args})
    return out


def finding_places(rank: RankAnalysis, steps: StepWindows) -> dict[str, float]:
    """Where on the timeline (ms from the step window's start) each kind of finding is seen in
    this rank (``RankAnalysis``): the longest GPU gap while the host waited for a batch (data
    loading) or issued work (host-bound), the slowest step (step variance), the memory peak
    (memory findings). Other findings have no single place."""
    places: dict[str, float] = {}
    idle, memory = rank.sections.idle, rank.sections.memory
    gaps = idle.longest if idle is not None else []
    host_waits = [g for g in gaps if g.category == "host_wait"]
    loading = [g for g in host_waits
               if any(is_dataloader(Kind.CPU_OP, h.name) for h in g.host)] or host_waits
    if host_waits:
        places["host_bound"] = max(host_waits, key=lambda g: g.duration_us).start_ms
        places["data_loading"] = max(loading, key=lambda g: g.duration_us).start_ms
    if len(steps) > 1:
        slowest = int(np.argmax(steps.durations))
        places["step_variance"] = (float(steps.starts[slowest]) - steps.span[0]) / 1000.0
    devices = memory.devices if memory is not None else []
    if devices:
        peak = next((d for d in devices if d.device.startswith("cuda")), devices[0])
        places.update({rule: peak.peak_ms for rule in MEMORY_RULES})
    return places


#: The memory findings, placed at the memory peak.
MEMORY_RULES = ("memory_pressure", "memory_headroom", "memory_growth", "memory_fragmentation")


def finding_time(finding: Finding, steps: StepWindows,
                 places: dict[str, float] | None = None) -> float:
    """Where a finding belongs on the timeline (µs from t0): the step or time the rule gives,
    else where ``finding_places`` saw it, else a "step N" in its evidence, else the start of
    the step window."""
    start = steps.span[0]
    step = finding.extra.get("step")
    at_ms = finding.extra.get("at_ms")
    if not isinstance(step, int) and not isinstance(at_ms, int | float):
        at_ms = (places or {}).get(finding.id)
    if not isinstance(step, int) and at_ms is None:
        found = [_STEP_IN_TEXT.search(e.where) for e in finding.evidence]
        step = next((int(m.group(1)) for m in found if m), None)
    if isinstance(step, int) and len(steps):
        hit = np.flatnonzero(steps.numbers == step)
        if len(hit):
            return float(steps.starts[hit[0]])
    if isinstance(at_ms, int | float):
        return start + float(at_ms) * 1000.0
    return start


def finding_events(findings: list[Finding], steps: StepWindows, offset: float,
                   thread: tuple[Any, Any], places: dict[str, float] | None = None
                   ) -> list[dict[str, Any]]:
    pid, tid = thread
    if not findings:
        return [{"ph": "i", "s": "g", "cat": CATEGORY, "pid": pid, "tid": tid,
                 "name": "trainprof: no major bottleneck found",
                 "ts": round(steps.span[0] + offset, 3), "args": {}}]
    out = []
    for i, f in enumerate(findings, 1):
        out.append({
            "ph": "i", "s": "g" if f.rank is None else "p", "cat": CATEGORY,
            "pid": pid, "tid": tid, "ts": round(finding_time(f, steps, places) + offset, 3),
            "name": f"trainprof {i}: {f.title}",
            "args": {"severity": f.severity, "rank": f.rank,
                     "saves": saving_phrase(f.reported_saving_pct, f.reported_saving_ms,
                                            shared_number(f, findings)),
                     "evidence": [evidence_text(e) for e in f.evidence],
                     "fix": f.fix.summary, "docs": f.docs},
        })
    return out
