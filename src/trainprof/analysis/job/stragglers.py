"""Across ranks: step-time spread, time waiting in collectives, and the straggler behind it.

Every rank runs the same collectives in the same order, so the i-th collective of a type in a
step is one *instance* seen by every rank. In a blocking collective the ranks that arrive
first wait inside it for the last one: the last to arrive shows the shortest collective, the
others' extra time is waiting. Per instance, ``wait = duration - shortest duration`` over the
ranks (clock-free); the rank with the shortest duration arrived last and caused that wait. A
rank is named the straggler when it caused most of the waiting and the wait is a real share of
the step, and in the median step too (one slow step is not a straggler). On the traces' clocks,
each instance is also split into arrival skew and transfer (analysis/job/arrival.py). What the
straggler has more of than the others is shown as its cause (analysis/job/straggler_cause.py).
docs/communication.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from msgspec import field

from trainprof.analysis.dataframes import data_frame
from trainprof.analysis.job.arrival import Arrival, arrival, waiting_us
from trainprof.analysis.job.straggler_cause import Cause, straggler_cause
from trainprof.analysis.sections.communication import Instances
from trainprof.structs import Record
from trainprof.trace.model import COLLECTIVE_TYPES

if TYPE_CHECKING:
    from trainprof.analysis.results import RankAnalysis

#: A straggler caused at least this share of all waiting in collectives (one rank that others
#: keep waiting for, not the noise of whoever happens to arrive last)...
STRAGGLER_MIN_SHARE = 0.75
#: ...and the wait it caused is at least this share of the median step time, both on average
#: and in the median step (a rank late in one step of four is a slow step, not a straggler).
STRAGGLER_MIN_STEP_SHARE = 0.05
#: Sends and receives are not matched across ranks: the i-th send of one pipeline stage and the
#: i-th send of the next are different transfers (activations one way, gradients the other),
#: and a stage waiting in recv for the one before it is the pipeline's schedule, judged by the
#: parallelism section (docs/parallelism.md), not a straggler.
POINT_TO_POINT = ("send", "recv", "send_recv")
_P2P_CODES = np.array([COLLECTIVE_TYPES.index(t) for t in POINT_TO_POINT])
# An instance key packs (step + 1, type, ordinal) into one int64.
_ORDINAL_BITS = 24
_TYPE_BITS = 5
_TYPE_CODES = 1 << _TYPE_BITS


class RankWait(Record):
    rank: int
    step_median_ms: float
    comm_ms_per_step: float | None
    exposed_comm_ms_per_step: float | None
    waited_ms_per_step: float  # time this rank waited inside matched collectives
    last_arrivals: int  # matched instances where this rank arrived last
    caused_wait_ms_per_step: float  # the others' mean wait in the instances it arrived last
    mean_start_lag_ms: float  # its start minus the earliest rank's start, on the traces' clocks
    # On the traces' clocks (analysis/job/arrival.py), ms per matched step:
    skew_ms_per_step: float = 0.0  # waiting for the last rank to arrive
    transfer_ms_per_step: float = 0.0  # from the last arrival to the end of its calls
    started_last: int = 0  # matched instances it started last
    caused_skew_ms_per_step: float = 0.0  # the others' mean skew where it started last


class Stragglers(Record):
    ranks: list[RankWait]
    step_spread_pct: float | None  # (slowest - fastest) / median of the ranks' median steps
    matched: int = field(name="matched_collectives")  # collective instances seen by every rank
    matched_steps: int
    straggler: int | None
    skew_pct: float | None = None  # arrival skew's share of the time in matched collectives
    arrival: str | None = None  # one sentence on the skew and the rank that causes most of it
    cause: Cause | None = None  # what makes the straggler late, where the trace shows it
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_pandas(self) -> Any:
        return data_frame([r.to_dict() for r in self.ranks])


def stragglers(ranks: list[RankAnalysis]) -> Stragglers:
    """Spread of step times across ranks and the rank that makes the others wait, if any."""
    by_rank: dict[int, list[RankAnalysis]] = {}
    for r in ranks:
        by_rank.setdefault(r.rank, []).append(r)
    ids = sorted(by_rank)
    step_ms = {k: [s["ms"] for r in by_rank[k] for s in r.steps.per_step] for k in ids}
    medians = {k: float(np.median(v)) if v else 0.0 for k, v in step_ms.items()}
    result = Stragglers(ranks=[], step_spread_pct=None, matched=0, matched_steps=0,
                        straggler=None)
    if len(ids) < 2:
        result.notes.append("One rank loaded: load every rank's trace to compare ranks.")
        return result
    world = max((r.environment.get("world_size") or 0 for r in ranks), default=0)
    if world > len(ids):
        result.notes.append(f"{len(ids)} of {world} ranks loaded: waiting caused by the ranks "
                            "not loaded is not attributed.")
    overall = float(np.median(list(medians.values())))
    if overall > 0:
        result.step_spread_pct = (max(medians.values()) - min(medians.values())) / overall * 100
    instances = {k: _merged(by_rank[k]) for k in ids}
    keys, dur, start, step_end = _match(instances, result.notes)
    result.matched = len(keys)
    result.matched_steps = len(np.unique(keys >> (_ORDINAL_BITS + _TYPE_BITS)))
    n_steps = max(result.matched_steps, 1)
    # Matrices are (rank, instance); with no instance they are (rank, 0) and all sums are 0.
    waits = dur - dur.min(axis=0)
    last = np.argmin(dur, axis=0)
    lag = start - start.min(axis=0)
    split = arrival(start, dur, step_end, n_steps)
    result.skew_pct = split.skew_pct
    for i, k in enumerate(ids):
        comm = _comm(by_rank[k])
        result.ranks.append(RankWait(
            rank=k,
            step_median_ms=medians[k],
            comm_ms_per_step=None if comm is None else comm[0],
            exposed_comm_ms_per_step=None if comm is None else comm[1],
            waited_ms_per_step=_wait_us(start[i], waits[i], step_end[i], last >= 0)
            / n_steps / 1000.0,
            last_arrivals=int((last == i).sum()),
            caused_wait_ms_per_step=float(np.mean(
                [_wait_us(start[j], waits[j], step_end[j], last == i)
                 for j in range(len(ids)) if j != i]))
            / n_steps / 1000.0,
            mean_start_lag_ms=float(lag[i].mean()) / 1000.0 if lag.shape[1] else 0.0,
            **_split(split, i),
        ))
    result.arrival = _arrival_sentence(result)
    median_step = _median_step_wait(keys, start, waits, step_end, last, result)
    _name_straggler(result, overall, keys, lag, last, median_step)
    if result.straggler is not None:
        slow = next(w for w in result.ranks if w.rank == result.straggler)
        result.cause = straggler_cause(slow.rank, by_rank, slow.caused_wait_ms_per_step)
        if result.cause is not None:
            result.evidence.append(result.cause.evidence())
    return result


def _wait_us(start: np.ndarray, wait: np.ndarray, step_end: np.ndarray,
             pick: np.ndarray) -> float:
    """A rank's time waiting in the picked collectives: each wait is the start of its call (it
    arrived early and waits for the last rank), up to its step's end (arrival.waiting_us)."""
    return waiting_us(start, wait, step_end, pick)


def _split(split: Arrival, i: int) -> dict[str, Any]:
    return {"skew_ms_per_step": float(split.skew_ms[i]),
            "transfer_ms_per_step": float(split.transfer_ms[i]),
            "started_last": int(split.late[i]),
            "caused_skew_ms_per_step": float(split.caused_ms[i])}


def _arrival_sentence(result: Stragglers) -> str | None:
    if result.skew_pct is None or not result.ranks:
        return None
    late = max(result.ranks, key=lambda r: r.caused_skew_ms_per_step)
    return (f"Arrival skew: {result.skew_pct:.0f}% of the time in matched collectives is "
            "waiting for the last rank to arrive (trace clocks), the rest transfer; rank "
            f"{late.rank} started last at {late.started_last} of {result.matched} and cost the "
            f"others {late.caused_skew_ms_per_step:.2f} ms per step.")


def _median_step_wait(keys: np.ndarray, start: np.ndarray, waits: np.ndarray,
                      step_end: np.ndarray, last: np.ndarray, result: Stragglers) -> float:
    """The wait the rank that caused most of it caused in the median matched step, ms."""
    if not len(keys) or not result.ranks:
        return 0.0
    best = int(np.argmax([r.caused_wait_ms_per_step for r in result.ranks]))
    steps = keys >> (_ORDINAL_BITS + _TYPE_BITS)
    others = [j for j in range(len(result.ranks)) if j != best]
    late = last == best
    per_step = [_others_wait_us(start, waits, step_end, others, np.flatnonzero(late & (steps == s)))
                for s in np.unique(steps)]
    return float(np.median(per_step)) / 1000.0


def _merged(ranks: list[RankAnalysis]) -> Instances:
    """One rank's collective instances over all its recording windows, point-to-point
    transfers left out (POINT_TO_POINT)."""
    parts = [r.sections.communication.instances for r in ranks
             if r.sections.communication is not None]
    if not parts:
        return Instances.empty()
    kind = np.concatenate([p.type for p in parts])
    keep = ~np.isin(kind, _P2P_CODES)
    return Instances(type=kind[keep],
                     step=np.concatenate([p.step for p in parts])[keep],
                     start_us=np.concatenate([p.start_us for p in parts])[keep],
                     dur_us=np.concatenate([p.dur_us for p in parts])[keep],
                     step_end_us=np.concatenate([p.step_ends() for p in parts])[keep])


def _keys(inst: Instances) -> np.ndarray:
    """(step, type, ordinal within the step and type) packed in one int64, per instance."""
    order = np.lexsort((inst.start_us, inst.type, inst.step))
    group = (inst.step[order] + 1) * _TYPE_CODES + inst.type[order]
    new = np.ones(len(group), dtype=bool)
    new[1:] = group[1:] != group[:-1]
    first = np.maximum.accumulate(np.where(new, np.arange(len(group)), 0))
    ordinal = np.arange(len(group)) - first
    keys = np.empty(len(group), dtype=np.int64)
    keys[order] = (group << _ORDINAL_BITS) + ordinal
    return keys


def _match(instances: dict[int, Instances], notes: list[str]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keys seen on every rank (groups whose counts agree), and duration/start matrices."""
    keyed = {k: _keys(v) for k, v in instances.items()}
    groups = [np.unique(v >> _ORDINAL_BITS, return_counts=True) for v in keyed.values()]
    common = groups[0][0]
    for g, _ in groups[1:]:
        common = np.intersect1d(common, g)
    counts = np.array([c[np.searchsorted(g, common)] for g, c in groups])
    agree = common[(counts == counts[0]).all(axis=0)] if len(common) else common
    dropped = len(common) - len(agree)
    if dropped:
        notes.append(f"{dropped} (step, collective) groups differ in count between ranks and "
                     "were not compared.")
    if not len(agree) and any(len(v) for v in instances.values()):
        notes.append("No collective could be matched across ranks (different steps or "
                     "collectives).")
    first = next(iter(keyed.values()))
    keys = np.sort(first[np.isin(first >> _ORDINAL_BITS, agree)])
    dur = np.empty((len(keyed), len(keys)))
    start = np.empty((len(keyed), len(keys)))
    end = np.empty((len(keyed), len(keys)))
    for i, (k, v) in enumerate(keyed.items()):
        order = np.argsort(v)
        pos = order[np.searchsorted(v[order], keys)]
        dur[i], start[i] = instances[k].dur_us[pos], instances[k].start_us[pos]
        end[i] = instances[k].step_ends()[pos]
    return keys, dur, start, end


def _comm(ranks: list[RankAnalysis]) -> tuple[float, float] | None:
    comms = [r.sections.communication for r in ranks if r.sections.communication is not None]
    steps = sum(c.steps for c in comms)
    if not comms or not steps:
        return None
    return (sum(c.busy_us for c in comms) / steps / 1000.0,
            sum(c.exposed_us for c in comms) / steps / 1000.0)


def _others_wait_us(start: np.ndarray, waits: np.ndarray, step_end: np.ndarray,
                    others: list[int], cols: np.ndarray) -> float:
    """The mean wait of ``others`` over the instances ``cols``."""
    pick = np.ones(len(cols), dtype=bool)
    return float(np.mean([_wait_us(start[j, cols], waits[j, cols], step_end[j, cols], pick)
                          for j in others]))


def _name_straggler(result: Stragglers, step_ms: float, keys: np.ndarray, lag: np.ndarray,
                    last: np.ndarray, median_step_ms: float) -> None:
    caused = np.array([r.caused_wait_ms_per_step for r in result.ranks])
    total = float(caused.sum())
    if not len(keys) or total <= 0:
        return
    best = int(np.argmax(caused))
    r = result.ranks[best]
    share = caused[best] / total
    if share < STRAGGLER_MIN_SHARE or r.caused_wait_ms_per_step < STRAGGLER_MIN_STEP_SHARE * step_ms:
        result.notes.append(
            f"No straggler: the most waiting any rank caused is rank {r.rank}'s "
            f"{r.caused_wait_ms_per_step:.2f} ms per step ({share:.0%} of all waiting).")
        return
    if median_step_ms < STRAGGLER_MIN_STEP_SHARE * step_ms:
        result.notes.append(
            f"No straggler: rank {r.rank} made the others wait {r.caused_wait_ms_per_step:.2f} "
            f"ms per step on average but {median_step_ms:.2f} ms in the median step (late in "
            "a few steps only: see the slow steps).")
        return
    result.straggler = r.rank
    types = sorted({COLLECTIVE_TYPES[(k >> _ORDINAL_BITS) % _TYPE_CODES] for k in keys})
    others = [x for x in result.ranks if x.rank != r.rank]
    late_lag = float(lag[best][last == best].mean()) / 1000.0
    result.evidence = [
        f"rank {r.rank} arrived last at {r.last_arrivals} of {result.matched} matched "
        f"collectives ({', '.join(types)})",
        f"the other ranks waited {r.caused_wait_ms_per_step:.1f} ms per step for it "
        f"({r.caused_wait_ms_per_step / step_ms:.0%} of the {step_ms:.1f} ms median step; "
        f"{share:.0%} of all waiting in collectives)",
        f"it waited {r.waited_ms_per_step:.1f} ms per step inside collectives, the other "
        f"ranks {np.mean([x.waited_ms_per_step for x in others]):.1f} ms",
        f"where it arrived last, it started {late_lag:.1f} ms after the first rank on "
        "average (trace clocks)",
        f"arrival skew: the others waited {r.caused_skew_ms_per_step:.1f} ms per step for it "
        f"to start its collectives (trace clocks); skew is {result.skew_pct or 0:.0f}% of "
        "the time in matched collectives, transfer the rest",
    ]
