"""Critical-path bounds on the findings' savings.

Removing some work from a step cannot shorten it by more than that work's time on the step's
critical path (the old path, less that work, is still a path). The critical path section
(analysis/critical_path) gives that time per category, and for the items it replayed the step
time at zero, a tighter bound. A finding whose estimate is larger is capped to the bound, and
says so in its evidence and in ``saving_capped_by``. ``BOUNDS`` names, for every finding whose
work is one of the path's categories or items, where that work is on the path; the others (a
risk, slow steps against the median, an optimizer made of host and device work) keep their own
estimate (docs/critical_path.md, docs/rules.md).
"""

from __future__ import annotations

from typing import Any

import msgspec

from trainprof.analysis.results import RankAnalysis
from trainprof.diagnose.findings import Evidence, Finding, capped
from trainprof.diagnose.rules.common import ms_of, pct_of

#: Host-side categories: where the path runs while the device waits on the host. A saving made
#: of device idle time (the GPU waiting for the host to launch, sync, compile...) is bounded by
#: them: while the device idles, the path is on the host.
HOST = ("host_compute", "launch_overhead", "sync_wait", "untraced_host")
#: Device compute: a saving made of kernels running faster is bounded by kernel time on the path.
DEVICE = ("gpu_compute",)
#: Communication: the collectives' kernels and the waits of other streams and threads on them.
COMMUNICATION = ("gpu_communication", "sync_wait")


class Bound(msgspec.Struct, frozen=True):
    """Where a finding's work is on the path: its categories, and the what-if item that is all
    of it (``item``: one (kind, name); ``kind``: every item of that kind, used when the path
    holds exactly one of them)."""

    categories: tuple[str, ...]
    item: tuple[str, str] | None = None
    kind: str | None = None
    #: The categories instead when the rank's communication is host ops (gloo, or collectives
    #: recorded on the host only): then it is host time on the path, not device time.
    on_host: tuple[str, ...] | None = None


#: finding id -> its bound. docs/critical_path.md lists them.
BOUNDS: dict[str, Bound] = {
    "data_loading": Bound(("data_loading",), item=("data_loader", "DataLoader")),
    "host_to_device_copies": Bound(("copies", "sync_wait", "launch_overhead")),
    "input_preprocessing": Bound(HOST),
    "host_bound": Bound(HOST),
    "small_kernels": Bound(HOST),
    "sync_points": Bound(HOST),
    "logging_overhead": Bound(HOST),
    "compilation": Bound(HOST),
    "untraced_time": Bound(HOST),
    "cuda_api_time": Bound(HOST),
    "memory_fragmentation": Bound(HOST),
    "low_occupancy": Bound(DEVICE),
    "no_tensor_cores": Bound(DEVICE),
    "attention_not_fused": Bound(DEVICE),
    "far_from_roofline": Bound(DEVICE),
    "communication_exposed": Bound(COMMUNICATION, kind="collective", on_host=HOST),
    "slow_collectives": Bound(COMMUNICATION, kind="collective", on_host=HOST),
    # fp64 ops and work outside the training phases: host time on a CPU run, kernels on a GPU.
    "wide_precision": Bound(HOST + DEVICE),
    "outside_training": Bound(HOST + DEVICE),
    "fsdp_exposed_communication": Bound(COMMUNICATION, kind="collective", on_host=HOST),
    "tensor_parallel_communication": Bound(COMMUNICATION, kind="collective", on_host=HOST),
}
#: A kind's items cover its category when their time on the path is within this many points of
#: the category's share (the what-if then bounds all of the work, not part of it).
COVER_TOLERANCE_PCT = 0.5
_KIND_CATEGORY = {"collective": "gpu_communication"}
#: A saving over its bound by less than this (points of the step) is left as it is: the bound
#: goes from the path's re-timed steps to the step table's through ms, which rounds.
CAP_TOLERANCE_PCT = 0.05


def _item_bound(path: Any, b: Bound) -> float | None:
    """The what-if bound: the item's, or the one replayed item of a kind that holds all of the
    kind's time on the path (two collectives' what-ifs do not add up to both removed)."""
    if b.item is not None:
        return path.saving_cap_pct(*b.item)
    if b.kind is None:
        return None
    items = [i for i in path.items if i.kind == b.kind]
    on_path = path.split_pct.get(_KIND_CATEGORY.get(b.kind, ""), 0.0)
    if len(items) != 1 or items[0].saving_pct_if_zero is None \
            or items[0].on_path_pct < on_path - COVER_TOLERANCE_PCT:
        return None
    return float(items[0].saving_pct_if_zero)


def path_bound(path: Any, finding_id: str, on_host: bool = False) -> tuple[float, str] | None:
    """The most a finding's fix can save (% of the step) by the critical path, and what says
    so; None when the path says nothing about its work. ``on_host``: the rank's collectives
    are host ops."""
    if finding_id not in BOUNDS or path is None or not getattr(path, "steps", None):
        return None
    b = BOUNDS[finding_id]
    categories = b.on_host if on_host and b.on_host is not None else b.categories
    bound = sum(path.split_pct.get(c, 0.0) for c in categories)
    how = "its time on the path (" + " + ".join(categories) + ")"
    replayed = _item_bound(path, b) if categories == b.categories else None
    if replayed is not None and replayed < bound:
        name = b.item[1] if b.item else next(i.name for i in path.items if i.kind == b.kind)
        if b.kind == "collective":  # "other": a kernel that does not name its collective
            name = "its collectives" + ("" if name == "other" else f" ({name})")
        bound, how = max(replayed, 0.0), f"what-if replay of the step without {name}"
    return bound, how


#: The job rules' findings with a bound: a cluster summary keeps their bounds, as it does not
#: keep the path (the rank rules' findings are capped where the trace is).
SUMMARY_BOUNDS = ("communication_exposed",)


def summary_bounds(r: RankAnalysis) -> dict[str, tuple[float, str]]:
    """The bounds a rank's cluster summary keeps (SUMMARY_BOUNDS)."""
    return {i: b for i in SUMMARY_BOUNDS if (b := rank_bound(r, i)) is not None}


def rank_bound(r: RankAnalysis, finding_id: str) -> tuple[float, str] | None:
    """``path_bound`` as a share of the rank's mean step: the path's shares are of its own
    (re-timed) steps, so the bound goes through ms per step. A rank read from a cluster
    summary has the bounds its summary kept instead of the path."""
    path = r.sections.critical_path
    if path is None and r.path_bounds:
        return r.path_bounds.get(finding_id)
    comm = r.sections.communication
    found = path_bound(path, finding_id, on_host=comm is not None and comm.source == "host ops")
    step_ms = path.step_ms if path is not None else None
    if found is None or step_ms is None:
        return None
    return pct_of(r, found[0] * step_ms / 100.0), found[1]


def cap_savings(r: RankAnalysis, findings: list[Finding]) -> list[Finding]:
    """The rank's findings, each saving no larger than its critical-path bound."""
    for f in findings:
        found = rank_bound(r, f.id)
        if found is None or f.saving_pct <= found[0] + CAP_TOLERANCE_PCT:
            continue
        bound, how = found
        f.evidence.append(Evidence(f"saving capped by the critical path (was "
                                   f"{f.saving_pct:.1f}%)", round(bound, 1), "% of step", how))
        f.saving_pct = bound
        f.saving_ms = ms_of(r, bound)
        capped(f, "critical_path")
    return findings
