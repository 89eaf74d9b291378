"""Kernel launch overhead: how long the host spends launching, how long kernels wait to start,
and whether the GPU is starved by the rate at which the CPU can launch.

A launch is a runtime or driver call (``cudaLaunchKernel``, ``cuLaunchKernel``, ``hipLaunchKernel``,
``cudaGraphLaunch``...) linked to at least one kernel. Only launches that start inside the step
window count. All times are µs.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
from msgspec import field

from trainprof.analysis import intervals as iv
from trainprof.analysis.calls.attribution import DeviceLinks, device_links
from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.event_columns import event_ends
from trainprof.analysis.overview.steps import StepWindows
from trainprof.analysis.sorting import group_order, unique_below
from trainprof.analysis.streaming.parts import ValueCounts
from trainprof.analysis.streaming.windows import Window, WindowedSection
from trainprof.analysis.tabular import Quantiles, share
from trainprof.structs import Derived, Record, asdict
from trainprof.trace.model import DEVICE_KINDS, Kind, Trace, is_graph_launch

#: A kernel shorter than this is "small": launching it costs about as much as running it.
SMALL_KERNEL_US = 10.0
#: Consecutive launches of one thread at most this far apart (end to start) are back to back:
#: the host is busy issuing work, not doing something else. Eager PyTorch spends 10-60 µs of
#: Python and dispatcher time per op, so 100 µs keeps a model's forward pass together.
BACK_TO_BACK_US = 100.0
#: A run is flagged CPU-bound when the GPU idles, while launches are back to back, for at least
#: this share of the step time.
CPU_BOUND_MIN_PCT = 20.0
#: Launch calls longer than this are outliers (HTA's default cut-off too).
SLOW_LAUNCH_US = 50.0
#: Kernels starting this long after their launch returned are outliers (HTA's default).
LATE_START_US = 100.0


class LaunchApi(Record):
    """One launch call name (``cudaLaunchKernel``, ``cuLaunchKernel``...)."""

    name: str
    calls: int
    mean_us: float
    total_us: float


class LaunchStats(Record):
    """Launch overhead inside the step window. Distributions are {mean, median, p90, max}."""

    json_derived = (Derived("thresholds", "graph_kernels"),)
    json_internal = frozenset({"records"})

    launches: int
    kernels: int
    launch_us: Quantiles  # CPU duration of the launch call
    delay_us: Quantiles  # kernel start - launch end, clipped at 0
    kernel_us: Quantiles  # duration of the kernels launched
    small_kernel_pct: float | None  # kernels shorter than SMALL_KERNEL_US, share of count
    shorter_than_launch_pct: float | None  # kernels shorter than their own launch call
    starved_kernel_pct: float | None  # kernels whose launch returned while the GPU was idle
    slow_launches: int  # launch calls longer than SLOW_LAUNCH_US
    late_starts: int  # kernels starting more than LATE_START_US after their launch
    gpu_idle_pct: float | None  # of the step time
    cpu_bound_pct: float | None  # GPU idle while launches are back to back, of the step time
    cpu_bound: bool
    apis: list[LaunchApi] = field(default_factory=list)
    #: CUDA/HIP graph replays (``cudaGraphLaunch``) and the kernels they started. Those kernels
    #: are busy time attributed to the graph launch; they have no launch call of their own, so
    #: the small, shorter-than-launch and starved shares count the other kernels only.
    graph_launches: int = 0
    graph_kernels: int = 0
    #: Per launch, for the API: event indices and times (not in the JSON).
    records: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def thresholds(self) -> dict[str, float]:
        """The thresholds the section's figures are counted against (docs/launch.md)."""
        return {"small_kernel_us": SMALL_KERNEL_US, "back_to_back_us": BACK_TO_BACK_US,
                "cpu_bound_min_pct": CPU_BOUND_MIN_PCT, "slow_launch_us": SLOW_LAUNCH_US,
                "late_start_us": LATE_START_US}

    def to_pandas(self, trace: Trace | None = None) -> Any:
        """One row per launch: call name, start, CPU time, delay, first kernel, kernels' time
        (names need the ``trace``); without it, one row per launch API."""
        if trace is None:
            return data_frame([asdict(a) for a in self.apis])
        r, ev = self.records, trace.events
        if not len(r.get("launch", ())):
            return data_frame([])
        return data_frame([
            {"launch": ev.names[ev.name[lc]], "ts_us": float(ev.ts[lc]), "launch_us": float(c),
             "delay_us": float(d), "kernel": ev.names[ev.name[k]], "kernels": int(n),
             "kernel_us": float(kd)}
            for lc, c, d, k, n, kd in zip(r["launch"], r["launch_us"], r["delay_us"],
                                          r["first_kernel"], r["kernels"], r["kernel_us"],
                                          strict=True)
        ])


class LaunchPart(msgspec.Struct):
    """What one window tells of the launches it owns (those starting in its region and in
    the steps): distributions as value counts, counts, and time in its span."""

    launch_us: ValueCounts
    delay_us: ValueCounts
    kernel_us: ValueCounts
    kernels: int
    single_kernels: int  # kernels not started by a graph launch
    small: int
    shorter_than_launch: int
    starved: int
    busy_us: float  # device busy time inside the window's part of the step span
    cpu_bound_us: float
    graph_launches: int
    graph_kernels: int
    api_name: np.ndarray  # per launch call name index: calls and total µs
    api_calls: np.ndarray
    api_us: np.ndarray
    has_gpu: bool
    names: list[str]  # the trace's name table (shared, not a copy)
    records: dict[str, np.ndarray]


def launch_part(window: Window) -> LaunchPart:
    """The launches that start in the window's region, inside the steps."""
    trace = window.trace
    ev = trace.events
    start, end = _owned_span(window)
    links = device_links(trace)
    is_kernel = (ev.kind[links.device] == Kind.KERNEL) & (links.launch >= 0)
    kern, launch = links.device[is_kernel], links.launch[is_kernel]
    inside = (ev.ts[launch] >= start) & (ev.ts[launch] < end)
    kern, launch = kern[inside], launch[inside]
    per_launch = _per_launch(trace, kern, launch)
    busy = _device_busy(trace, *window.span)
    owned_busy = iv.clip(busy, start, end)
    back_to_back = _launch_runs(trace, links, start, end)
    cpu_bound_us = iv.subtract(back_to_back, owned_busy).total() if len(back_to_back) else 0.0
    graph = _graph_launches(trace, launch)
    single_kern, single_launch = kern[~graph], launch[~graph]
    k_dur, l_dur = ev.dur[single_kern], ev.dur[single_launch]
    name = ev.name[per_launch["launch"]]
    api_name, group = np.unique(name, return_inverse=True)
    return LaunchPart(
        launch_us=ValueCounts.of(per_launch["launch_us"]),
        delay_us=ValueCounts.of(per_launch["delay_us"]),
        kernel_us=ValueCounts.of(ev.dur[kern]),
        kernels=len(kern), single_kernels=len(single_kern),
        small=int((k_dur < SMALL_KERNEL_US).sum()),
        shorter_than_launch=int((k_dur < l_dur).sum()),
        starved=int((~_inside(busy, event_ends(ev)[single_launch])).sum()),
        busy_us=owned_busy.total(), cpu_bound_us=cpu_bound_us,
        graph_launches=len(np.unique(launch[graph])), graph_kernels=int(graph.sum()),
        api_name=api_name, api_calls=np.bincount(group, minlength=len(api_name)),
        api_us=np.bincount(group, weights=per_launch["launch_us"], minlength=len(api_name)),
        has_gpu=trace.has_gpu, names=ev.names, records=per_launch,
    )


def combine_launches(parts: list[LaunchPart], steps: StepWindows) -> LaunchStats:
    """Launch overhead over every window's launches."""
    start, end = steps.span
    window = end - start
    idle = window - sum(p.busy_us for p in parts)
    cpu_bound_pct = share(sum(p.cpu_bound_us for p in parts), window)
    single = sum(p.single_kernels for p in parts)
    launch_us = ValueCounts.merged([p.launch_us for p in parts])
    delay = ValueCounts.merged([p.delay_us for p in parts])
    return LaunchStats(
        launches=len(launch_us),
        kernels=sum(p.kernels for p in parts),
        launch_us=launch_us.summary(),
        delay_us=delay.summary(),
        kernel_us=ValueCounts.merged([p.kernel_us for p in parts]).summary(),
        small_kernel_pct=share(float(sum(p.small for p in parts)), single),
        shorter_than_launch_pct=share(float(sum(p.shorter_than_launch for p in parts)), single),
        starved_kernel_pct=share(float(sum(p.starved for p in parts)), single),
        slow_launches=launch_us.greater_than(SLOW_LAUNCH_US),
        late_starts=delay.greater_than(LATE_START_US),
        gpu_idle_pct=share(idle, window) if any(p.has_gpu for p in parts) else None,
        cpu_bound_pct=cpu_bound_pct,
        cpu_bound=bool(cpu_bound_pct is not None and cpu_bound_pct >= CPU_BOUND_MIN_PCT),
        apis=_apis(parts),
        graph_launches=sum(p.graph_launches for p in parts),
        graph_kernels=sum(p.graph_kernels for p in parts),
        # Event indices are the window's: kept only when one window is the whole trace.
        records=parts[0].records if len(parts) == 1 else {},
    )


#: Launch duration and delay, small kernels, starved kernels and the CPU-bound indicator. Each
#: window counts the launches that start in its region; their kernels lie in its margin.
launch_stats = WindowedSection(partial=launch_part, combine=combine_launches, cost=0.65)


def _owned_span(window: Window) -> tuple[float, float]:
    """The part of the step span (first step's start to last step's end) the window owns."""
    if not len(window.steps):
        return 0.0, 0.0
    (start, end), (lo, hi) = window.span, window.region
    return max(start, lo), min(end, hi)


def _graph_launches(trace: Trace, launch: np.ndarray) -> np.ndarray:
    """Per launch call index, whether it replays a CUDA/HIP graph."""
    ev = trace.events
    names = np.unique(ev.name[launch])
    graph = np.zeros(len(ev.names), dtype=bool)
    graph[names] = [is_graph_launch(Kind.RUNTIME, ev.names[n]) for n in names.tolist()]
    return graph[ev.name[launch]]


def _per_launch(trace: Trace, kern: np.ndarray, launch: np.ndarray) -> dict[str, np.ndarray]:
    """One entry per launch call (a graph launch starts many kernels): its first kernel."""
    ev = trace.events
    uniq, inverse = unique_below(launch, len(ev))
    n = len(uniq)
    first_ts = np.full(n, np.inf)
    np.minimum.at(first_ts, inverse, ev.ts[kern])
    first_kernel = np.full(n, -1, dtype=np.int64)
    is_first = ev.ts[kern] == first_ts[inverse]
    first_kernel[inverse[is_first][::-1]] = kern[is_first][::-1]
    return {
        "launch": uniq,
        "launch_us": ev.dur[uniq],
        "delay_us": np.maximum(first_ts - event_ends(ev)[uniq], 0.0),
        "first_kernel": first_kernel,
        "kernels": np.bincount(inverse, minlength=n),
        "kernel_us": np.bincount(inverse, weights=ev.dur[kern], minlength=n),
    }


def _device_busy(trace: Trace, start: float, end: float) -> iv.Intervals:
    """When any device of the rank runs a kernel, copy or memset, inside [start, end)."""
    ev = trace.events
    mask = ev.of_kind(*DEVICE_KINDS)
    return iv.clip(iv.union(ev.ts[mask], event_ends(ev)[mask]), start, end)


def _inside(s: iv.Intervals, points: np.ndarray) -> np.ndarray:
    """Whether each point lies strictly inside an interval of ``s``."""
    if not len(s):
        return np.zeros(len(points), dtype=bool)
    i = np.searchsorted(s.starts, points, side="left") - 1
    ok = i >= 0
    out = np.zeros(len(points), dtype=bool)
    out[ok] = points[ok] < s.ends[i[ok]]
    return out


def _launch_runs(trace: Trace, links: DeviceLinks, start: float, end: float) -> iv.Intervals:
    """Spans during which a host thread launches device work back to back."""
    ev = trace.events
    launches, _ = unique_below(links.launch[links.launch >= 0], len(ev))
    if len(launches) < 2:
        return iv.Intervals.empty()
    order = group_order(ev.tid[launches], ev.ts[launches])
    launches = launches[order]
    same_thread = ev.tid[launches[1:]] == ev.tid[launches[:-1]]
    gap_start, gap_end = event_ends(ev)[launches[:-1]], ev.ts[launches[1:]]
    close = same_thread & (gap_end - gap_start <= BACK_TO_BACK_US)
    # Each close pair spans from the first launch's start to the second launch's end.
    runs = iv.union(ev.ts[launches[:-1]][close], event_ends(ev)[launches[1:]][close])
    return iv.clip(runs, start, end)


def _apis(parts: list[LaunchPart]) -> list[LaunchApi]:
    names = np.concatenate([p.api_name for p in parts]) if parts else np.empty(0)
    if not len(names):
        return []
    table = parts[0].names
    uniq, group = np.unique(names, return_inverse=True)
    calls = np.bincount(group, weights=np.concatenate([p.api_calls for p in parts]))
    total = np.bincount(group, weights=np.concatenate([p.api_us for p in parts]))
    out = [LaunchApi(name=table[uniq[g]], calls=int(calls[g]),
                     mean_us=float(total[g] / calls[g]), total_us=float(total[g]))
           for g in range(len(uniq))]
    return sorted(out, key=lambda a: (-a.total_us, a.name))
