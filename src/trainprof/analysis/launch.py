"""Kernel launch overhead: how long the host spends launching, how long kernels wait to start,
and whether the GPU is starved by the rate at which the CPU can launch.

A launch is a runtime or driver call (``cudaLaunchKernel``, ``cuLaunchKernel``, ``hipLaunchKernel``,
``cudaGraphLaunch``...) linked to at least one kernel. Only launches that start inside the step
window count. All times are µs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainprof.analysis import intervals as iv
from trainprof.analysis.attribution import DeviceLinks, device_links
from trainprof.analysis.frames import data_frame
from trainprof.analysis.steps import StepWindows
from trainprof.analysis.tabular import share, summary
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


@dataclass
class LaunchApi:
    """One launch call name (``cudaLaunchKernel``, ``cuLaunchKernel``...)."""

    name: str
    calls: int
    mean_us: float
    total_us: float


@dataclass
class LaunchStats:
    """Launch overhead inside the step window. Distributions are {mean, median, p90, max}."""

    launches: int
    kernels: int
    launch_us: dict[str, float | None]  # CPU duration of the launch call
    delay_us: dict[str, float | None]  # kernel start - launch end, clipped at 0
    kernel_us: dict[str, float | None]  # duration of the kernels launched
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
    #: Per launch, for the API: event indices and times (not in to_dict).
    records: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("records")
        d["thresholds"] = {"small_kernel_us": SMALL_KERNEL_US, "back_to_back_us": BACK_TO_BACK_US,
                           "cpu_bound_min_pct": CPU_BOUND_MIN_PCT,
                           "slow_launch_us": SLOW_LAUNCH_US, "late_start_us": LATE_START_US}
        return d

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


def launch_stats(trace: Trace, steps: StepWindows) -> LaunchStats:
    """Launch duration and delay, small kernels, starved kernels and the CPU-bound indicator."""
    ev = trace.events
    start, end = steps.span
    links = device_links(trace)
    is_kernel = (ev.kind[links.device] == Kind.KERNEL) & (links.launch >= 0)
    kern, launch = links.device[is_kernel], links.launch[is_kernel]
    inside = (ev.ts[launch] >= start) & (ev.ts[launch] < end)
    kern, launch = kern[inside], launch[inside]
    per_launch = _per_launch(trace, kern, launch)
    busy = _device_busy(trace, start, end)
    window = end - start
    idle = window - busy.total()
    back_to_back = _launch_runs(trace, links, start, end)
    cpu_bound_us = iv.subtract(back_to_back, busy).total() if len(back_to_back) else 0.0
    cpu_bound_pct = share(cpu_bound_us, window)
    graph = _graph_launches(trace, launch)
    single_kern, single_launch = kern[~graph], launch[~graph]
    k_dur, l_dur = ev.dur[single_kern], ev.dur[single_launch]
    delay = per_launch["delay_us"]
    return LaunchStats(
        launches=len(per_launch["launch"]),
        kernels=len(kern),
        launch_us=summary(per_launch["launch_us"]),
        delay_us=summary(delay),
        kernel_us=summary(ev.dur[kern]),
        small_kernel_pct=share(float((k_dur < SMALL_KERNEL_US).sum()), len(single_kern)),
        shorter_than_launch_pct=share(float((k_dur < l_dur).sum()), len(single_kern)),
        starved_kernel_pct=share(float((~_inside(busy, ev.end[single_launch])).sum()),
                                 len(single_kern)),
        slow_launches=int((per_launch["launch_us"] > SLOW_LAUNCH_US).sum()),
        late_starts=int((delay > LATE_START_US).sum()),
        gpu_idle_pct=share(idle, window) if trace.has_gpu else None,
        cpu_bound_pct=cpu_bound_pct,
        cpu_bound=bool(cpu_bound_pct is not None and cpu_bound_pct >= CPU_BOUND_MIN_PCT),
        apis=_apis(trace, per_launch),
        graph_launches=len(np.unique(launch[graph])),
        graph_kernels=int(graph.sum()),
        records=per_launch,
    )


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
    uniq, inverse = np.unique(launch, return_inverse=True)
    n = len(uniq)
    first_ts = np.full(n, np.inf)
    np.minimum.at(first_ts, inverse, ev.ts[kern])
    first_kernel = np.full(n, -1, dtype=np.int64)
    is_first = ev.ts[kern] == first_ts[inverse]
    first_kernel[inverse[is_first][::-1]] = kern[is_first][::-1]
    return {
        "launch": uniq,
        "launch_us": ev.dur[uniq],
        "delay_us": np.maximum(first_ts - ev.end[uniq], 0.0),
        "first_kernel": first_kernel,
        "kernels": np.bincount(inverse, minlength=n),
        "kernel_us": np.bincount(inverse, weights=ev.dur[kern], minlength=n),
    }


def _device_busy(trace: Trace, start: float, end: float) -> iv.Intervals:
    """When any device of the rank runs a kernel, copy or memset, inside [start, end)."""
    ev = trace.events
    mask = ev.of_kind(*DEVICE_KINDS)
    return iv.clip(iv.union(ev.ts[mask], ev.end[mask]), start, end)


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
    launches = np.unique(links.launch[links.launch >= 0])
    if len(launches) < 2:
        return iv.Intervals.empty()
    order = np.lexsort((ev.ts[launches], ev.tid[launches]))
    launches = launches[order]
    same_thread = ev.tid[launches[1:]] == ev.tid[launches[:-1]]
    gap_start, gap_end = ev.end[launches[:-1]], ev.ts[launches[1:]]
    close = same_thread & (gap_end - gap_start <= BACK_TO_BACK_US)
    # Each close pair spans from the first launch's start to the second launch's end.
    runs = iv.union(ev.ts[launches[:-1]][close], ev.end[launches[1:]][close])
    return iv.clip(runs, start, end)


def _apis(trace: Trace, per_launch: dict[str, np.ndarray]) -> list[LaunchApi]:
    ev = trace.events
    name = ev.name[per_launch["launch"]]
    if not len(name):
        return []
    uniq, group = np.unique(name, return_inverse=True)
    calls = np.bincount(group)
    total = np.bincount(group, weights=per_launch["launch_us"])
    out = [LaunchApi(name=ev.names[uniq[g]], calls=int(calls[g]),
                     mean_us=float(total[g] / calls[g]), total_us=float(total[g]))
           for g in range(len(uniq))]
    return sorted(out, key=lambda a: (-a.total_us, a.name))
