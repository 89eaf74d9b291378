"""Runs of launched work, folded for the what-if replay (``replay.WhatIfReplay``).

Kernels queued on a stream one after another by launch calls from one stretch of host time
form a *run*: each starts at the latest of the previous one's start plus the chain lag between
them and its launch (from the same visited host point b), and no other edge reads its time.
Over a run p_1..p_m that follows the point p_0, with chain lags l_j (S_j their running sum,
non-decreasing when weights are not negative) and launch lags L_j, the max-plus sum unrolls:

    t[p_m] = max(t[p_0] + S_m, t[b] + S_m + max_j(L_j - S_j), UNREACHED + S_m - S_1)

(the last term: each point's own reset to UNREACHED, carried down the chain). So a replay
visits p_m through two edges instead of the run's 2m, and the points before it in the run
need no time of their own: with non-negative weights none is later than p_m.
"""

from __future__ import annotations

import msgspec
import numpy as np

from trainprof.analysis.critical_path.points import UNREACHED


class LaunchRuns(msgspec.Struct):
    """The runs of one visiting order; edges are numbered as the replay sorts them."""

    inner: np.ndarray  # visiting positions of the points before each run's last (no time)
    chain_edges: np.ndarray  # each member's chain edge, run after run, in chain order
    cross_edges: np.ndarray  # ... and its launch edge
    offsets: np.ndarray  # where each run starts in those
    lasts: np.ndarray  # where each run ends in those
    end: np.ndarray  # visiting position of each run's last point ...
    before: np.ndarray  # ... of the point before its first ...
    source: np.ndarray  # ... and of the point its launches leave from
    kept_edges: np.ndarray  # the edges not into a run, as the replay sorts them

    def __len__(self) -> int:
        return len(self.end)

    def folded(self, lags: np.ndarray, changed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows (lag from the point before, lag from the launches' point, reset time) of each
        run's last point, and whether any of the run's edges changed, from every edge's
        ``lags`` and ``changed``."""
        step = lags[self.chain_edges]
        total = np.cumsum(step)
        before_run = np.r_[0, total[self.offsets[1:] - 1]]
        within = total - np.repeat(before_run, np.diff(np.r_[self.offsets, len(step)]))
        del total, step
        at_last, at_first = within[self.lasts], within[self.offsets]
        best = np.maximum.reduceat(lags[self.cross_edges] - within, self.offsets)
        touched = np.logical_or.reduceat(changed[self.chain_edges] | changed[self.cross_edges],
                                         self.offsets)
        return np.stack([at_last, at_last + best, UNREACHED + at_last - at_first]), touched


def launch_runs(linked: np.ndarray, cross_dst: np.ndarray, cross_src: np.ndarray,
                anchored: np.ndarray, rank: np.ndarray, sorted_at: np.ndarray
                ) -> LaunchRuns | None:
    """The runs among visited points in chain order (``linked``: the point before is its
    chain's; ``anchored``: it has an anchor), their cross edges ``cross_dst``/``cross_src``
    (after the chain edges, one per linked point, in the build order), visiting positions
    ``rank``, and ``sorted_at``: where each built edge is in the replay's order. None: none."""
    n = len(linked)
    n_chain = int(linked.sum())
    if not len(cross_dst):
        return None
    cross_in = np.bincount(cross_dst, minlength=n)
    last_cross = np.full(n, -1, dtype=np.int64)
    last_cross[cross_dst] = np.arange(len(cross_dst))
    is_source = np.zeros(n, dtype=bool)
    is_source[cross_src] = True
    candidate = linked & (cross_in == 1) & ~anchored
    launched_from = np.where(candidate, cross_src[np.maximum(last_cross, 0)], -1)
    # A point continues the run of the one before it: both candidates, launched from the same
    # point, and the one before read by nothing else.
    goes_on = np.zeros(n, dtype=bool)
    goes_on[1:] = (candidate[1:] & candidate[:-1] & (launched_from[1:] == launched_from[:-1])
                   & ~is_source[:-1])
    starts = candidate & ~goes_on & np.r_[goes_on[1:], False]
    if not starts.any():
        return None
    members = np.flatnonzero(starts | goes_on)
    offsets = np.flatnonzero(starts[members])
    lasts = np.r_[offsets[1:], len(members)] - 1
    chain_built = np.cumsum(linked)[members] - 1  # the chain edges come first, in point order
    cross_built = n_chain + last_cross[members]
    into_run = np.zeros(len(sorted_at), dtype=bool)
    into_run[sorted_at[chain_built]] = True
    into_run[sorted_at[cross_built]] = True
    first = members[offsets]
    inner = np.ones(len(members), dtype=bool)
    inner[lasts] = False
    return LaunchRuns(inner=rank[members[inner]], chain_edges=sorted_at[chain_built],
                      cross_edges=sorted_at[cross_built], offsets=offsets, lasts=lasts,
                      end=rank[members[lasts]], before=rank[first - 1],
                      source=rank[launched_from[first]], kept_edges=np.flatnonzero(~into_run))
