"""The ``critical_path`` section: each step's critical path, its split, and the what-ifs."""

from __future__ import annotations

import numpy as np

from trainprof.analysis.critical_path.categories import CATEGORY_KEYS, Category
from trainprof.analysis.critical_path.graph import StepGraph, build_graph
from trainprof.analysis.critical_path.replay import (
    PathWalker,
    WhatIfReplay,
    binding_inputs,
    replay,
    step_ends,
)
from trainprof.analysis.critical_path.result import (
    CriticalPath,
    PathItem,
    PathPieces,
    StepPath,
    pieces_per_step,
)
from trainprof.analysis.overview.steps import StepWindows
from trainprof.trace.model import Trace

#: Items on the path replayed at zero and at half their time (most time on the path first).
WHAT_IF_ITEMS = 4
#: Items with less of the path than this (%) are not replayed: removing one cannot save more
#: than its time on the path, too little to act on.
WHAT_IF_MIN_PCT = 0.5
#: Scales a what-if applies to an item's time.
WHAT_IF_SCALES = (0.0, 0.5)
#: A trace whose times span more than this (µs, a day) gets no critical path: its clocks are
#: broken, and its times in ns would overflow the replay's arithmetic.
MAX_SPAN_US = 86_400e6
#: Events in the steps the critical path is built for, at most (about 2 s of analysis on this
#: machine type): a longer trace gets evenly spaced steps only, and says so.
STEP_EVENTS = 400_000
#: Graph points one what-if replay visits at most (about 50 ms each on this machine type): a
#: longer trace replays evenly spaced steps only, and says so.
WHAT_IF_POINTS = 60_000


def broken_clock() -> CriticalPath:
    """The result for a trace whose times span more than MAX_SPAN_US."""
    return CriticalPath(steps=[], split_us=dict.fromkeys(CATEGORY_KEYS, 0.0),
                        split_pct=dict.fromkeys(CATEGORY_KEYS, 0.0), items=[],
                        typical_launch_lag_us=0.0,
                        notes=["The trace's times span more than a day: no critical path "
                               "is drawn for it (its clocks cannot be trusted)."])


def span_ok(first_ts: float, last_end: float) -> bool:
    """Whether times from ``first_ts`` to ``last_end`` (µs) can be trusted and replayed."""
    span = float(last_end - min(first_ts, 0.0))
    return 0.0 <= span <= MAX_SPAN_US


def critical_path_of(trace: Trace, steps: StepWindows, notes: list[str]) -> CriticalPath:
    """The critical path of the chosen ``steps`` of ``trace`` (``notes`` say how chosen)."""
    g = build_graph(trace, steps)
    t, converged = replay(g, start=g.time)
    if not converged:
        notes.append("The graph replay stopped before it settled; the times are approximate.")
    pred, via = binding_inputs(g, t)
    ends = step_ends(g, t)
    last = _last_points(g, t, ends)
    paths, item_us, walker = [], np.zeros(len(g.items)), PathWalker(pred)
    cross_cat = np.append(g.cross_category, 0)  # via -1 (a chain edge) reads the 0 at the end
    shown = pieces_per_step(int((last >= 0).sum()))  # the pieces each step's JSON shows
    for k in range(len(g.step_start)):
        if last[k] < 0:
            continue
        path = walker.path(int(last[k]))
        paths.append(_step_path(trace, g, t, (via, cross_cat), path, k, int(steps.numbers[k]),
                                item_us, shown))
    del walker, pred, via, last  # the what-ifs below need none of them
    total = sum(p.step_us for p in paths)
    split = {key: sum(p.split_us[key] for p in paths) for key in CATEGORY_KEYS}
    pct = {key: (100.0 * v / total if total > 0 else 0.0) for key, v in split.items()}
    items, replayed = _what_ifs(g, t, ends, item_us, total)
    if replayed < len(paths):
        notes.append(f"What-ifs replay {replayed} of the {len(paths)} steps (evenly spaced), "
                     "to keep the analysis fast; their step times are those steps' mean.")
    if not paths:
        notes.append("No step holds recorded work: there is no critical path to show.")
    return CriticalPath(steps=paths, split_us=split, split_pct=pct, items=items,
                        typical_launch_lag_us=g.launch_lag_ns / 1000.0, notes=notes)


def step_events(ts: np.ndarray, starts: np.ndarray, bound: float) -> np.ndarray:
    """Events (sorted start times ``ts``) from each start to the next, the last to ``bound``."""
    return np.diff(np.searchsorted(ts, np.r_[starts, bound]))


def sampled(steps: StepWindows,
            per_step: np.ndarray) -> tuple[StepWindows, list[str], np.ndarray | None]:
    """The steps to analyse, a note, and their positions: all (positions None), or evenly
    spaced ones holding about STEP_EVENTS events (``per_step``: each step's, ``step_events``)."""
    if len(steps) < 2:
        return steps, [], None
    total = int(per_step.sum())
    if total <= STEP_EVENTS:
        return steps, [], None
    count = max(1, int(len(steps) * STEP_EVENTS / total))
    keep = np.unique(np.linspace(0, len(steps) - 1, count).round().astype(int))
    chosen = StepWindows(numbers=steps.numbers[keep], starts=steps.starts[keep],
                         ends=steps.ends[keep], source=steps.source)
    return chosen, [f"The critical path is of {len(keep)} of the {len(steps)} steps (evenly "
                    f"spaced), to keep the analysis of this long trace fast."], keep


def _last_points(g: StepGraph, t: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The point that ends each step (the latest, at ``ends``; the last in order among
    equals)."""
    out = np.full(len(g.step_start), -1, dtype=np.int64)
    if not len(t):
        return out
    # Per chain (its points contiguous, chains in point order), its latest time: the step's
    # last chain reaching the step's end holds the point, the last there at that time.
    firsts = np.flatnonzero(g.heads)
    bounds = np.r_[firsts, len(t)]
    latest = np.maximum.reduceat(t, firsts)
    step = g.chain_step[g.chain[firsts]]
    for c in np.flatnonzero(latest == ends[step]).tolist():  # a handful of chains
        a, b = int(bounds[c]), int(bounds[c + 1])
        m = latest[c]
        last = b - 1 if t[b - 1] == m else a + int(np.flatnonzero(t[a:b] == m)[-1])
        out[step[c]] = max(out[step[c]], last)
    return out


def _step_path(trace: Trace, g: StepGraph, t: np.ndarray,
               vias: tuple[np.ndarray, np.ndarray], pts: np.ndarray, k: int, number: int,
               item_us: np.ndarray, shown: int) -> StepPath:
    """Step ``k``'s path through the points ``pts``; ``vias``: each point's binding cross
    edge (``binding_inputs``) and the cross edges' categories, then a 0 (for via -1);
    ``shown``: how many of its pieces its JSON shows (the longest)."""
    via, cross_cat = vias
    a, b = pts[:-1], pts[1:]
    origin = g.step_start[k]  # the path before the step began (the host ahead) is cut off
    from_ = np.maximum(t[a], origin)
    till = t[b]
    us = np.maximum(till - from_, 0) / 1000.0
    via_b = via[b]
    cross = via_b >= 0
    cat = np.where(cross, cross_cat[via_b], g.category[b]).astype(np.int64)
    item = np.where(cross, -1, g.item[b])
    has_item = item >= 0
    item_us += np.bincount(item[has_item], weights=us[has_item], minlength=len(item_us))
    split_arr = np.bincount(cat, weights=us, minlength=len(CATEGORY_KEYS))
    lead = float(max(t[pts[0]] - origin, 0)) / 1000.0
    split_arr[Category.UNTRACED_HOST] += lead
    split = {key: float(v) for key, v in zip(CATEGORY_KEYS, split_arr, strict=True)}
    # The pieces: the stretches of some time, named and laned (read for those only).
    timed = us > 0
    b, cross = b[timed], cross[timed]
    event = np.where(cross, -1, g.event[b])
    name = np.where(event >= 0, trace.events.name[np.maximum(event, 0)], -1)
    lane = g.chain[b].astype(np.int64)  # the graph's narrower chains, as the result's lanes
    pieces = _merged(lane, from_[timed] / 1000.0, till[timed] / 1000.0, cat[timed], name)
    pieces.lanes, pieces.names = g.chain_lane, trace.events.names
    # A step whose work all ended before it began (re-timed to an empty device span) has a
    # path of no time, not a negative one.
    step_us = max(float(t[pts[-1]] - g.step_start[k]) / 1000.0, 0.0)
    return StepPath(step=number, start_us=float(g.step_start[k]) / 1000.0, step_us=step_us,
                    split_us=split, shown=pieces.longest(shown), pieces_total=pieces.count,
                    pieces=pieces)


def _merged(lane: np.ndarray, start: np.ndarray, end: np.ndarray, cat: np.ndarray,
            name: np.ndarray) -> PathPieces:
    """Stretches of time with one lane, category and name merged into one piece."""
    if not len(start):
        return PathPieces(lane=lane, start_us=start, end_us=end, category=cat, name=name,
                          lanes=[], categories=CATEGORY_KEYS, names=[])
    same = (lane[1:] == lane[:-1]) & (cat[1:] == cat[:-1]) & (name[1:] == name[:-1]) \
        & (start[1:] == end[:-1])
    first = np.flatnonzero(np.r_[True, ~same])
    last = np.r_[first[1:], len(start)] - 1
    return PathPieces(lane=lane[first], start_us=start[first], end_us=end[last],
                      category=cat[first], name=name[first], lanes=[],
                      categories=CATEGORY_KEYS, names=[])


def _what_ifs(g: StepGraph, t: np.ndarray, ends: np.ndarray, item_us: np.ndarray,
              total_us: float) -> tuple[list[PathItem], int]:
    reached = ends > np.iinfo(np.int64).min // 2
    if not reached.any():
        return [], 0
    chosen = _replayed_steps(g, reached)
    now = _mean_step_ms(ends, g, chosen)
    fast = WhatIfReplay(g, t, chosen)
    reached = chosen
    out = []
    for i in np.argsort(-item_us, kind="stable")[:WHAT_IF_ITEMS]:
        if item_us[i] <= 0 or 100.0 * item_us[i] / total_us < WHAT_IF_MIN_PCT:
            break
        kind, name = g.items[i]
        scaled: list[float] = []
        pos = np.flatnonzero(g.item == i)
        reads = fast.reads(pos)  # the same for every scale
        for scale in WHAT_IF_SCALES:
            if scaled and scaled[0] >= now:  # no saving at zero: none at any scale
                scaled.append(now)
                continue
            w = np.rint(g.weight[pos] * scale).astype(np.int64)
            ends_if = fast.changed_step_ends(pos, w, reads=reads)
            scaled.append(_mean_step_ms(ends_if, g, reached))
        out.append(PathItem(kind=kind, name=name, on_path_us=float(item_us[i]),
                            on_path_pct=100.0 * float(item_us[i]) / total_us if total_us else 0.0,
                            step_ms=now, step_ms_if_zero=scaled[0], step_ms_if_half=scaled[1]))
    return out, int(reached.sum())


def _replayed_steps(g: StepGraph, reached: np.ndarray) -> np.ndarray:
    """The steps the what-ifs replay: all, or evenly spaced ones within WHAT_IF_POINTS."""
    if 2 * len(g.src) <= WHAT_IF_POINTS:  # no more points are touched than the edges' ends
        return reached
    touched = np.zeros(len(g.time), dtype=bool)
    touched[g.src] = touched[g.dst] = True
    per_step = np.bincount(g.chain_step[g.chain[touched]], minlength=len(reached))
    total = int(per_step[reached].sum())
    if total <= WHAT_IF_POINTS:
        return reached
    steps = np.flatnonzero(reached)
    count = max(1, int(len(steps) * WHAT_IF_POINTS / total))
    chosen = np.zeros(len(reached), dtype=bool)
    chosen[steps[np.linspace(0, len(steps) - 1, count).round().astype(int)]] = True
    return chosen


def _mean_step_ms(ends: np.ndarray, g: StepGraph, reached: np.ndarray) -> float:
    return float((ends[reached] - g.step_start[reached]).mean()) / 1e6
