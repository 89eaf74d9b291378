"""The ``critical_path`` section: each step's critical path, its split, and the what-ifs."""

from __future__ import annotations

import numpy as np

from trainprof.analysis.critical_path.categories import CATEGORY_KEYS, Category
from trainprof.analysis.critical_path.graph import StepGraph, build_graph
from trainprof.analysis.critical_path.replay import (
    WhatIfReplay,
    binding_inputs,
    replay,
    step_ends,
    walk_back,
)
from trainprof.analysis.critical_path.result import CriticalPath, PathItem, PathPiece, StepPath
from trainprof.analysis.steps import StepWindows
from trainprof.trace.model import Trace

#: Items on the path replayed at zero and at half their time (most time on the path first).
WHAT_IF_ITEMS = 6
#: Scales a what-if applies to an item's time.
WHAT_IF_SCALES = (0.0, 0.5)


def critical_path(trace: Trace, steps: StepWindows) -> CriticalPath:
    """The critical path of every step of ``trace`` (see docs/critical_path.md)."""
    g = build_graph(trace, steps)
    t, converged = replay(g, start=g.time)
    notes = [] if converged else ["The graph replay stopped before it settled; the times are "
                                  "approximate."]
    pred, via = binding_inputs(g, t)
    ends = step_ends(g, t)
    last = _last_points(g, t)
    paths, item_us = [], np.zeros(len(g.items))
    for k in range(len(g.step_start)):
        if last[k] < 0:
            continue
        path = walk_back(pred, int(last[k]))
        paths.append(_step_path(trace, g, t, via, path, k, int(steps.numbers[k]), item_us))
    total = sum(p.step_us for p in paths)
    split = {key: sum(p.split_us[key] for p in paths) for key in CATEGORY_KEYS}
    pct = {key: (100.0 * v / total if total > 0 else 0.0) for key, v in split.items()}
    items = _what_ifs(g, t, ends, item_us, total)
    if not paths:
        notes.append("No step holds recorded work: there is no critical path to show.")
    return CriticalPath(steps=paths, split_us=split, split_pct=pct, items=items,
                        typical_launch_lag_us=g.launch_lag_ns / 1000.0, notes=notes)


def _last_points(g: StepGraph, t: np.ndarray) -> np.ndarray:
    """The point that ends each step (the latest; the last in order among equals)."""
    step = g.chain_step[g.chain]
    order = np.lexsort((np.arange(len(t)), t, step))
    out = np.full(len(g.step_start), -1, dtype=np.int64)
    out[step[order]] = order  # the last write per step wins: its latest point
    return out


def _step_path(trace: Trace, g: StepGraph, t: np.ndarray, via: np.ndarray, path: list[int],
               k: int, number: int, item_us: np.ndarray) -> StepPath:
    split = dict.fromkeys(CATEGORY_KEYS, 0.0)
    first = path[0]
    lead = float(t[first] - g.step_start[k]) / 1000.0
    split[Category.UNTRACED_HOST.name.lower()] += lead
    pieces: list[PathPiece] = []
    names = trace.events.names
    for a, b in zip(path[:-1], path[1:], strict=True):
        us = float(t[b] - t[a]) / 1000.0
        if via[b] >= 0:
            cat = Category(int(g.cross_category[via[b]]))
            lane, name = g.chain_lane[g.chain[b]], ""
        else:
            cat = Category(int(g.category[b]))
            lane = g.chain_lane[g.chain[b]]
            e = int(g.event[b])
            name = names[trace.events.name[e]] if e >= 0 else ""
            if g.item[b] >= 0:
                item_us[g.item[b]] += us
        split[cat.name.lower()] += us
        if us > 0:
            _add_piece(pieces, PathPiece(lane, t[a] / 1000.0, t[b] / 1000.0,
                                         cat.name.lower(), name))
    step_us = float(t[path[-1]] - g.step_start[k]) / 1000.0
    return StepPath(step=number, step_us=step_us, split_us=split, pieces=pieces)


def _add_piece(pieces: list[PathPiece], piece: PathPiece) -> None:
    """Append, merging with the previous piece when it continues it on the same lane."""
    if pieces:
        prev = pieces[-1]
        if (prev.lane, prev.category, prev.name) == (piece.lane, piece.category, piece.name) \
                and abs(prev.end_us - piece.start_us) < 1e-9:
            prev.end_us = piece.end_us
            return
    piece.start_us, piece.end_us = float(piece.start_us), float(piece.end_us)
    pieces.append(piece)


def _what_ifs(g: StepGraph, t: np.ndarray, ends: np.ndarray, item_us: np.ndarray,
              total_us: float) -> list[PathItem]:
    reached = ends > np.iinfo(np.int64).min // 2
    if not reached.any():
        return []
    now = _mean_step_ms(ends, g, reached)
    fast = WhatIfReplay(g)
    out = []
    for i in np.argsort(-item_us, kind="stable")[:WHAT_IF_ITEMS]:
        if item_us[i] <= 0:
            break
        kind, name = g.items[i]
        scaled = []
        for scale in WHAT_IF_SCALES:
            w = g.weight.copy()
            mask = g.item == i
            w[mask] = np.rint(w[mask] * scale).astype(np.int64)
            scaled.append(_mean_step_ms(fast.step_ends(w), g, reached))
        out.append(PathItem(kind=kind, name=name, on_path_us=float(item_us[i]),
                            on_path_pct=100.0 * float(item_us[i]) / total_us if total_us else 0.0,
                            step_ms=now, step_ms_if_zero=scaled[0], step_ms_if_half=scaled[1]))
    return out


def _mean_step_ms(ends: np.ndarray, g: StepGraph, reached: np.ndarray) -> float:
    return float((ends[reached] - g.step_start[reached]).mean()) / 1e6
